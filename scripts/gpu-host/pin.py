#!/usr/bin/env python3
"""Pin --gib GiB of host memory with cudaHostRegister and hold it.

For scripts/gpu-host/nvml-check.sh: the driver maps the pages for the GPU
(dma_map_sg with thousands of entries, seen on this host), so the tracer's
per-process outstanding bytes for this pid should come to --gib GiB, within
page rounding. The buffer is touched first so every page exists. Writes
--ready (pid and bytes) once pinned, holds --seconds, unpins, and prints one
JSON line. cudaHostRegister pins HOST memory: it does not use BAR1 (BAR1 maps
GPU memory for peers), so BAR1 used is compared, not expected to grow.
"""
import argparse
import json
import os
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, required=True)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--ready", required=True, help="file written once pinned")
    args = ap.parse_args()

    size = int(args.gib * (1 << 30))
    torch.cuda.set_device(args.gpu)
    torch.cuda.init()
    cudart = torch.cuda.cudart()
    host = torch.empty(size, dtype=torch.uint8)
    host.fill_(1)  # fault every page in before pinning
    t0 = time.perf_counter()
    rc = cudart.cudaHostRegister(host.data_ptr(), size, 0)
    if int(rc) != 0:
        raise SystemExit(f"cudaHostRegister({size}) failed: {rc}")
    reg_s = time.perf_counter() - t0
    # One copy so the mapping is used by the GPU, not just created.
    dev = torch.empty(1 << 20, dtype=torch.uint8, device=f"cuda:{args.gpu}")
    dev.copy_(host[: 1 << 20], non_blocking=True)
    torch.cuda.synchronize()
    with open(args.ready, "w") as f:
        f.write(f"{os.getpid()} {size}\n")
    time.sleep(args.seconds)
    t1 = time.perf_counter()
    cudart.cudaHostUnregister(host.data_ptr())
    unreg_s = time.perf_counter() - t1
    print(json.dumps({"pid": os.getpid(), "gpu": args.gpu, "bytes": size,
                      "register_s": reg_s, "unregister_s": unreg_s,
                      "held_s": args.seconds}))


if __name__ == "__main__":
    main()
