# verify.py's inputs for the FP8 block-scale MoE: real FP8 block quantisation
# instead of FlashInfer-Bench's independent draws.  FIB draws the fp8 tensors
# as randn clamped to [-2, 2] (a few dozen of the 256 e4m3 codes) and the
# float32 scales as randn (half of them negative), which is what `khlua eval`
# reproduces; here, as DeepSeek-V3's fp8 recipe quantises:
#   hidden_states: unit-variance bf16 activations, one scale per (token,
#     128-column block) = amax / 448, codes = x / scale -> e4m3 (the whole
#     e4m3 range is used, scales positive), scale stored transposed [56, T];
#   gemm1/gemm2 weights: unit-variance values, one scale per 128 x 128 block
#     ([E, out / 128, in / 128]), amax / 448 likewise;
#   routing_logits (a safetensors blob in the contest, absent here): float32
#     randn; routing_bias (likewise): 0.1 * randn in bf16, small beside the
#     sigmoid scores, so that tokens still spread over the groups and about
#     one choice in eight is a local expert;
#   local_expert_offset, routed_scaling_factor: the workload's scalars.
# Unit variance keeps the output around 1e4..1e5, far above the contest's
# atol of 1, so the comparison says something (verify.py also reports the
# matched ratio at 1e-2 / 1e-2).


def _quant_blocks(torch, x, rows_block, cols_block):
    """x [..., R, C] float32 -> (e4m3 codes, float32 scales [..., R/rb, C/cb])."""
    *lead, R, C = x.shape
    xb = x.reshape(*lead, R // rows_block, rows_block, C // cols_block, cols_block)
    amax = xb.abs().amax(dim=(-3, -1), keepdim=True).clamp_min(1e-12)
    scale = amax / 448.0
    codes = (xb / scale).to(torch.float8_e4m3fn).reshape(*lead, R, C)
    return codes, scale.squeeze(-1).squeeze(-2).contiguous()


def make_inputs(torch, definition, workload, axes, device, gen, fib_random, read_safetensors=None,
                pkg_dir=None):
    T = axes["seq_len"]
    E, EL = axes["num_experts"], axes["num_local_experts"]
    H, I = axes["hidden_size"], axes["intermediate_size"]

    def randn(*shape):
        return torch.randn(shape, dtype=torch.float32, device=device, generator=gen)

    out = {}
    out["routing_logits"] = randn(T, E)
    out["routing_bias"] = (0.1 * randn(E)).to(torch.bfloat16)
    x = randn(T, H).to(torch.bfloat16).float()
    hs, hs_scale = _quant_blocks(torch, x, 1, 128)          # scales [T, 56]
    out["hidden_states"] = hs
    out["hidden_states_scale"] = hs_scale.reshape(T, H // 128).t().contiguous()  # [56, T]
    w1, s1 = _quant_blocks(torch, randn(EL, 2 * I, H), 128, 128)  # [EL, 32, 56]
    out["gemm1_weights"], out["gemm1_weights_scale"] = w1, s1
    w2, s2 = _quant_blocks(torch, randn(EL, H, I), 128, 128)      # [EL, 56, 16]
    out["gemm2_weights"], out["gemm2_weights_scale"] = w2, s2
    for name in ("local_expert_offset", "routed_scaling_factor"):
        out[name] = workload["inputs"][name]["value"]
    # definition order, as verify.py passes them to the reference
    return {name: out[name] for name in definition["inputs"]}
