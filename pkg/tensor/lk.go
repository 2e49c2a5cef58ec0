package tensor

// LK is a loss of the LK family (Nebius, arXiv 2602.23881), which trains a
// draft toward the acceptance rate of speculative sampling instead of toward
// the target distribution alone: a weighted sum of its forms, each weight
// 0 or more (not normalised; speculators' JSON combinations weigh forms the
// same way). Per row, with p the target distribution and q = softmax(logits)
// over the same columns, and α = Σ_j min(p_j, q_j) the probability that a
// token drawn from q is accepted against p:
//
//	KL      Σ_j p_j·(log p_j - log q_j)          (0·log 0 = 0)
//	TV      1 - α                                (the total variation)
//	NLA     -log max(α, LKEpsilon)               (speculators' clamp)
//	Hybrid  λ·KL + (1-λ)·TV, λ = exp(-Eta·α)
//
// Hybrid's λ is computed from α with its gradient stopped (α detached, as
// both reference implementations do): KL dominates while the draft accepts
// little and TV takes over as α grows. A detached λ is part of the
// objective's definition, not an approximation of its gradient.
type LK struct {
	// KL, TV, NLA and Hybrid weigh the forms in the row's loss.
	KL, TV, NLA, Hybrid float64
	// Eta is Hybrid's η (3 in the paper's and speculators' default).
	Eta float64
}

// LKEpsilon is NLA's floor on α (speculators' ε): a row the draft cannot
// accept at all has loss -log ε and no NLA gradient, instead of an infinite
// loss.
const LKEpsilon = 1e-5

// LKTie is the share of TV's gradient a column gets where p_j = q_j exactly
// (torch.minimum's subgradient there, which splits it evenly): 1 where
// q_j < p_j, 0 where q_j > p_j.
const LKTie = 0.5
