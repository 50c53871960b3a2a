# verify.py's inputs for the DSA top-k indexer, as FlashInfer-Bench's
# dsa_topk_indexer evaluator makes them: the k cache is drawn as bf16 randn
# and packed into deep_gemm's FP8 page layout (per page: 64 * 128 e4m3 bytes,
# then 64 float32 scales; scale = amax over the 128 values / 448), since
# random int8 bytes would be NaN fp8 codes and garbage scales.  seq_lens and
# block_table come from the workload's blob; q, weights as FIB draws them.
import os


def pack_k_cache(torch, num_pages, page_size, head_dim, device, gen):
    x = torch.randn((num_pages, page_size, head_dim), dtype=torch.float32, device=device,
                    generator=gen).to(torch.bfloat16).float()
    scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / 448.0
    fp8 = (x / scale).to(torch.float8_e4m3fn)
    data = fp8.view(torch.uint8).reshape(num_pages, page_size * head_dim)
    sc = scale.reshape(num_pages, page_size).contiguous().view(torch.uint8).reshape(num_pages, page_size * 4)
    packed = torch.cat([data, sc], dim=1).contiguous()
    return packed.view(torch.int8).reshape(num_pages, page_size, 1, head_dim + 4)


def make_inputs(torch, definition, workload, axes, device, gen, fib_random, read_safetensors=None,
                pkg_dir=None):
    out = {}
    for name, t in definition["inputs"].items():
        spec = workload["inputs"].get(name, {"type": "random"})
        shape = [axes[a] for a in t["shape"]]
        if spec["type"] == "safetensors":
            out[name] = read_safetensors(torch, os.path.join(pkg_dir, spec["path"]),
                                         spec["tensor_key"]).to(device)
        elif name == "k_index_cache_fp8":
            out[name] = pack_k_cache(torch, axes["num_pages"], axes["page_size"],
                                     axes["index_head_dim"], device, gen)
        else:
            dtype = {"float8_e4m3fn": torch.float8_e4m3fn, "float32": torch.float32,
                     "int32": torch.int32}[t["dtype"]]
            out[name] = fib_random(torch, shape, dtype, device, gen)
    return out
