#!/usr/bin/env python3
"""Huge scatter-gather mappings for gpudirect-trace (issue 23).

cudaHostRegister pins a host buffer and the NVIDIA driver maps it for the
GPU with one dma_map_sg of thousands of entries; cudaHostUnregister unmaps
it. --sizes (GiB) are registered one after the other, each freed before the
next (so at most the largest is resident). --context-only creates the CUDA
context and exits: the context's own mappings, to subtract. Prints one JSON
line: what was registered, each call's status and time.
"""
import argparse
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0.25,1,4,16", help="GiB, comma-separated")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--context-only", action="store_true")
    args = ap.parse_args()

    torch.cuda.init()
    torch.cuda.set_device(args.gpu)
    torch.empty(1, device=f"cuda:{args.gpu}")  # the context exists from here
    torch.cuda.synchronize(args.gpu)
    out = {"gpu": args.gpu, "registered": [], "total_bytes": 0}
    if not args.context_only:
        cudart = torch.cuda.cudart()
        for s in args.sizes.split(","):
            size = int(float(s) * (1 << 30))
            buf = torch.empty(size, dtype=torch.uint8)
            ptr = buf.data_ptr()
            t0 = time.perf_counter()
            rc = int(cudart.cudaHostRegister(ptr, size, 0))
            t1 = time.perf_counter()
            rc2 = int(cudart.cudaHostUnregister(ptr)) if rc == 0 else None
            t2 = time.perf_counter()
            out["registered"].append({"gib": float(s), "bytes": size, "register_rc": rc,
                                      "unregister_rc": rc2, "register_s": t1 - t0,
                                      "unregister_s": t2 - t1})
            if rc == 0:
                out["total_bytes"] += size
            del buf
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
