#pragma once
// Numerics profiles (ARCHITECTURE idea 4).
//   reference: f32 everywhere, no simulated quantization beyond the stored weights (what HF
//              transformers computes in fp32).
//   faithful:  the released inference code's numerics (MODEL-SPEC 2.2, 2.3, 9). V4: FP8 1x128 ue8m0
//              activation quantization before FP8/FP4 linears, bf16 activations between ops, FP8
//              round trip of the KV nope dims (blocks of 64), Hadamard + FP4 round trip of the
//              indexer q and keys (blocks of 32), bf16 indexer scores, f32 compressor/gate/head.
//              V3: the release's gemm_impl "bf16" (FP8 weights dequantized to bf16, bf16 products,
//              no activation quantization), bf16 activations, MLA scores and probabilities, bf16
//              gate, bf16 expert accumulation and bf16 logits (forward_v3.cpp lists each point).
#include <string>

namespace plumb {

enum class Numerics { Reference, Faithful };

const char* numerics_name(Numerics n);
Numerics parse_numerics(const std::string& name);  // plumb::Error listing the valid names

}  // namespace plumb
