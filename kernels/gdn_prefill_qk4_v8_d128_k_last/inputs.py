# verify.py's inputs for gdn_prefill: FlashInfer-Bench's distributions, except
# that q and k are L2-normalised over head_size (as Qwen3-Next feeds them).
# With raw randn keys the recurrence grows ~60x per token and the Python
# reference itself overflows after ~20 tokens (PLAN.md), so nothing could be
# compared on the long workloads.  cu_seqlens comes from the workload's blob;
# q and k from theirs (kernels/make_blobs.py, the same inputs `khlua eval`
# reads) where present, else drawn here and normalised the same way.
import os


def make_inputs(torch, definition, workload, axes, device, gen, fib_random, read_safetensors=None,
                pkg_dir=None):
    out = {}
    for name, t in definition["inputs"].items():
        spec = workload["inputs"].get(name, {"type": "random"})
        if t["shape"] is None:
            out[name] = spec["value"]
            continue
        shape = [axes[a] for a in t["shape"]]
        path = os.path.join(pkg_dir, spec["path"]) if spec["type"] == "safetensors" else None
        if path and (name not in ("q", "k") or os.path.exists(path)):
            out[name] = read_safetensors(torch, path, spec["tensor_key"]).to(device)
            continue
        dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[t["dtype"]]
        x = fib_random(torch, shape, dtype, device, gen)
        if name in ("q", "k"):
            x = torch.nn.functional.normalize(x.float(), dim=-1).to(dtype)
        out[name] = x
    return out
