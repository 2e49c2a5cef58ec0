package chat

// TokenMask marks the tokens that overlap a byte span: mask[i] is true when
// token i's byte range offsets[i] = [s, e) is non-empty and shares at least
// one byte with one of spans (sorted, non-overlapping [start, end) ranges, as
// AssistantSpans returns). A token that straddles a span boundary carries
// assistant bytes and is therefore marked; zero-width tokens (those a
// post-processor inserts, such as BOS) never are. It reuses dst when it has
// the capacity and returns the mask, one entry per offset.
//
// offsets are byte offsets into the same text the spans refer to, e.g. from
// tokenizer.EncodeOffsets(text, ...).
func TokenMask(dst []bool, offsets [][2]int, spans [][2]int) []bool {
	if cap(dst) >= len(offsets) {
		dst = dst[:len(offsets)]
	} else {
		dst = make([]bool, len(offsets))
	}
	for i, o := range offsets {
		s, e := o[0], o[1]
		if e <= s {
			dst[i] = false
			continue
		}
		// First span whose end is after s.
		lo, hi := 0, len(spans)
		for lo < hi {
			mid := int(uint(lo+hi) >> 1)
			if spans[mid][1] <= s {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		for lo < len(spans) && spans[lo][1] <= spans[lo][0] {
			lo++ // empty span
		}
		dst[i] = lo < len(spans) && spans[lo][0] < e
	}
	return dst
}

// CountMasked returns the number of true entries of mask.
func CountMasked(mask []bool) int {
	n := 0
	for _, m := range mask {
		if m {
			n++
		}
	}
	return n
}
