// Kernels for the simulator's image tests (tests/test_sim_library.c):
// two extern "C" kernels, one mangled template kernel and a device
// function that must not be reported as a kernel; and, for
// cuKernelGetParamInfo, a kernel taking one parameter of each kind (char,
// short, int, float, double, pointer, a by-value struct aligned to 16, a
// 3-byte struct, a char after it), one taking none, and one taking a
// struct too large for EIATTR_KPARAM_INFO's 14-bit size (nvcc then writes
// EIATTR_KPARAM_INFO_V2 records).
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

struct __align__(16) sim_v16 { // 32 bytes, aligned to 16
    float x, y, z;
    int w;
    double d;
};
struct sim_odd { // 3 bytes, aligned to 1
    char c[3];
};

extern "C" __global__ void sim_params(char c, short s, int i, float f, double d,
                                      float *p, sim_v16 v, sim_odd o, char last)
{
    if (i)
        p[threadIdx.x] = c + s + f + (float)d + v.x + (float)v.d + o.c[2] + last;
}

extern "C" __global__ void sim_no_params() {}

struct sim_big { // 20000 bytes: more than 16383
    char b[20000];
};

extern "C" __global__ void sim_big_param(char a, sim_big s, int c)
{
    if (c)
        s.b[c] = a;
}
