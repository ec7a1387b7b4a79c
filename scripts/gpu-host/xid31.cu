// A CUDA kernel that writes to an unmapped GPU virtual address: the GPU's MMU
// faults and the driver logs "NVRM: Xid (PCI:...): 31, pid=N, name=xid31, ...
// MMU Fault" (seen on the GPU host: shared/notes/environment.md). For
// scripts/gpu-host/nvml-check.sh. Prints its pid first so the Xid line can be
// matched to this process, then the CUDA error the fault gave.
#include <cstdio>
#include <cstdint>
#include <unistd.h>
#include <cuda_runtime.h>

__global__ void poke(volatile int *p) { *p = 42; }

int main() {
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    int *ok = nullptr;
    if (cudaMalloc(&ok, 4096) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc failed\n");
        return 1;
    }
    // 1 TiB past a real allocation: inside the GPU's virtual address space,
    // mapped to nothing (and not a CPU mapping the driver could migrate).
    volatile int *bad = (volatile int *)((uintptr_t)ok + (1ull << 40));
    printf("writing to %p\n", (void *)bad);
    fflush(stdout);
    poke<<<1, 1>>>(bad);
    cudaError_t e = cudaDeviceSynchronize();
    printf("cudaDeviceSynchronize: %s (%d)\n", cudaGetErrorString(e), (int)e);
    return e == cudaSuccess ? 2 : 0;
}
