// Package nn holds the layers drafter's models and drafters are built from,
// written once over a tensor.Device, each with its backward beside its
// forward, in the style of llm.c: Linear (trainable, or frozen over weights
// the device prepares), Attention (the projections, optional fused q/k/v and
// per-head norms, RoPE, and the attention itself through the Attender its
// caller supplies: the target's caches, the draft's session, the unrolled
// training), MLP (the SwiGLU block, optional fused gate/up) and the rotary
// position embedding's tables (RoPE). The element-wise ops and their backward
// passes (RMSNorm, SwiGLU, SiLU, the rotation itself) are the device's own
// ops.
//
// Conventions: forward passes overwrite their outputs; backward passes
// ACCUMULATE into the gradients they are given (so a parameter used twice
// simply receives both contributions), and an empty gradient tensor means
// "not needed".
package nn
