# cmake -DNVCC=... -DSRC=... -DOUT=... -P make_images.cmake
# Builds the simulator's test images with nvcc when it is there; a missing
# or failing nvcc leaves the images out (the tests skip those cases).
file(MAKE_DIRECTORY "${OUT}")
foreach(f sim_kernels.cubin sim_kernels.fatbin sim_kernels.ptx
          sim_kernels_lz4.fatbin sim_kernels_zstd.fatbin)
  file(REMOVE "${OUT}/${f}")
endforeach()
if(EXISTS "${NVCC}")
  set(base "${NVCC}" -arch=sm_90)
  execute_process(COMMAND ${base} -cubin -o "${OUT}/sim_kernels.cubin" "${SRC}"
                  RESULT_VARIABLE r1 OUTPUT_QUIET ERROR_QUIET)
  execute_process(COMMAND ${base} -fatbin -o "${OUT}/sim_kernels.fatbin" "${SRC}"
                  RESULT_VARIABLE r2 OUTPUT_QUIET ERROR_QUIET)
  execute_process(COMMAND ${base} -ptx -o "${OUT}/sim_kernels.ptx" "${SRC}"
                  RESULT_VARIABLE r3 OUTPUT_QUIET ERROR_QUIET)
  execute_process(COMMAND ${base} -fatbin --compress-mode=speed -Xfatbin -compress-all
                          -o "${OUT}/sim_kernels_lz4.fatbin" "${SRC}"
                  RESULT_VARIABLE r4 OUTPUT_QUIET ERROR_QUIET)
  execute_process(COMMAND ${base} -fatbin --compress-mode=size -Xfatbin -compress-all
                          -o "${OUT}/sim_kernels_zstd.fatbin" "${SRC}"
                  RESULT_VARIABLE r5 OUTPUT_QUIET ERROR_QUIET)
endif()
file(WRITE "${OUT}/stamp" "")
