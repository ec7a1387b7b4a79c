#!/usr/bin/env python3
"""DMA-heavy GPU workload for gpudirect-trace validation and overhead runs.

Per GPU, for --seconds or --iters: pin a host buffer with cudaHostRegister
(the driver maps it for the GPU: dma_map_sg), copy it to the device and back,
unpin it (dma_unmap_sg); plus pinned-memory copies through PyTorch's
allocator. Prints one JSON line with iterations and elapsed time, so the
overhead runner can compare runs.
"""
import argparse
import ctypes
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--size-mib", type=float, default=1.0)
    ap.add_argument("--big-mib", type=int, default=256)
    args = ap.parse_args()

    cudart = torch.cuda.cudart()
    ngpu = torch.cuda.device_count()
    size = int(args.size_mib * (1 << 20))
    host = [torch.empty(size, dtype=torch.uint8) for _ in range(ngpu)]
    dev = [torch.empty(size, dtype=torch.uint8, device=f"cuda:{i}") for i in range(ngpu)]
    big = torch.empty(args.big_mib << 20, dtype=torch.uint8).pin_memory()
    big_dev = [torch.empty_like(big, device=f"cuda:{i}") for i in range(ngpu)]
    for i in range(ngpu):
        torch.cuda.synchronize(i)

    t0 = time.perf_counter()
    for it in range(args.iters):
        for g in range(ngpu):
            with torch.cuda.device(g):
                ptr = host[g].data_ptr()
                rc = cudart.cudaHostRegister(ctypes.c_void_p(ptr), size, 0)
                if int(rc) != 0:
                    raise SystemExit(f"cudaHostRegister failed: {rc}")
                dev[g].copy_(host[g], non_blocking=True)
                host[g].copy_(dev[g], non_blocking=True)
                torch.cuda.synchronize(g)
                cudart.cudaHostUnregister(ctypes.c_void_p(ptr))
        if it % 200 == 0:
            for g in range(ngpu):
                big_dev[g].copy_(big, non_blocking=True)
                torch.cuda.synchronize(g)
    elapsed = time.perf_counter() - t0
    print(json.dumps({"gpus": ngpu, "iters": args.iters, "size": size, "elapsed_s": elapsed,
                      "pairs_per_s": args.iters * ngpu / elapsed}), flush=True)


if __name__ == "__main__":
    main()
