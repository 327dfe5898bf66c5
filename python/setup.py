"""pip install ./python (offline, --no-build-isolation with Debian's
setuptools): builds cucore._core with libcucore's sources compiled in, and
the simulated driver as cucore/libcucore-sim.so beside it, so the package
stands alone. CUCORE_CUDA_INCLUDE=DIR: the CUDA headers (default
/usr/local/cuda/include); CUCORE_DLPACK_INCLUDE=DIR: dlpack.h (default
/usr/include/dlpack, then cuda.core's copy in site-packages).
The installed package loads libcuda.so.1; CUCORE_DRIVER=sim loads the
simulator it holds: the library looks for libcucore-sim.so next to the
file that holds its code, here the extension module
(include/cucore/driver.h)."""
import glob
import os
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SIM = "libcucore-sim"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def first_dir(env, candidates, header):
    dirs = [os.environ[env]] if os.environ.get(env) else candidates
    for d in dirs:
        if os.path.isfile(os.path.join(d, header)):
            return d
    raise SystemExit("%s not found in %s: set %s=DIR" % (header, " ".join(dirs), env))


cuda = first_dir("CUCORE_CUDA_INCLUDE", ["/usr/local/cuda/include"], "cuda.h")
dlpack = first_dir("CUCORE_DLPACK_INCLUDE", [
    "/usr/include/dlpack",
    os.path.join(sysconfig.get_paths()["purelib"], "cuda", "core", "_include")], "dlpack.h")
lib_sources = sorted(glob.glob(os.path.join(ROOT, "src", "*", "*.c")))
py_sources = sorted(glob.glob(os.path.join(HERE, "src", "*.c")))

core = Extension(
    "cucore._core",
    sources=[os.path.relpath(p, HERE) for p in py_sources] + lib_sources,
    include_dirs=[os.path.join(ROOT, "include"), os.path.join(ROOT, "src"), cuda, dlpack],
    define_macros=[("CUC_BUILDING", None), ("CUC_SIM_RELDIR", '"../lib"'),
                   ("_GNU_SOURCE", None)],
    extra_compile_args=["-std=c11", "-fvisibility=hidden"],
    libraries=["dl", "pthread"],
)

# The simulated driver: a plain shared library, not a Python module, named
# as CUCORE_DRIVER=sim looks for it, exporting only the CUDA entry points
# (sim/CMakeLists.txt builds the same sources the same way).
sim = Extension(
    "cucore." + SIM,
    sources=sorted(glob.glob(os.path.join(ROOT, "sim", "*.c"))),
    include_dirs=[cuda],
    define_macros=[("_GNU_SOURCE", None)],
    extra_compile_args=["-std=c11", "-fvisibility=hidden"],
    extra_link_args=["-Wl,--no-undefined"],
    libraries=["dl", "pthread"],
)


class BuildExt(build_ext):
    """Names the simulator libcucore-sim.so, not by the module suffix."""

    def get_ext_filename(self, fullname):
        parts = fullname.split(".")
        if parts[-1] == SIM:
            return os.path.join(*parts[:-1], SIM + ".so")
        return super().get_ext_filename(fullname)


setup(
    name="cucore",
    version="0.1.0",
    description="CUDA objects that cross process boundaries: pickle, multiprocessing, Dask",
    packages=["cucore"],
    ext_modules=[core, sim],
    cmdclass={"build_ext": BuildExt},
    python_requires=">=3.9",
)
