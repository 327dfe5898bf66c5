// Kernels for the simulator's image tests (tests/test_sim_library.c):
// two extern "C" kernels, one mangled template kernel and a device
// function that must not be reported as a kernel.
__device__ __noinline__ float sim_helper(float x) { return x * 2.0f; }

extern "C" __global__ void sim_add_one(float *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = sim_helper(p[i]) + 1.0f;
}

extern "C" __global__ void sim_scale(float *p, float s) { p[threadIdx.x] *= s; }

template <typename T> __global__ void sim_fill(T *p) { p[threadIdx.x] = T(1); }
template __global__ void sim_fill<int>(int *);
