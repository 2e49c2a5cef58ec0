package tensor

// Span is one packed sequence of a training batch for AttendTTT and
// AttendTTTBackward: rows [Start, Start+N) of every row-indexed tensor of the
// call. Sequences are packed end to end so that one call covers a batch; no
// row attends across a span's bounds.
type Span struct{ Start, N int }
