// Package nn holds the neural-network layers drafter computes by hand, each as a
// forward function with its backward right below it, in the style of llm.c.
//
// Conventions: all tensors are row-major float32 slices owned by the caller;
// forward functions overwrite their outputs; backward functions ACCUMULATE into
// the gradient slices they are given (so a parameter used twice simply receives
// both contributions), and a nil gradient slice means "not needed". Matrix
// multiplies go through tensor.Backend; element-wise work is split over the CPU
// cores with tensor.Parallel. Nothing here allocates per element.
package nn
