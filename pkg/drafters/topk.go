package drafters

// TopK writes the indices of the k largest values of x into idx (reusing its
// storage), best first, ties to the lower index, and returns idx[:min(k,
// len(x))]. It allocates only when idx has less capacity than that.
func TopK(x []float32, k int, idx []int) []int {
	k = min(k, len(x))
	idx = idx[:0]
	if k <= 0 {
		return idx
	}
	for i, v := range x {
		if len(idx) == k && v <= x[idx[k-1]] {
			continue
		}
		pos := len(idx)
		if len(idx) < k {
			idx = append(idx, i)
		} else {
			pos = k - 1
		}
		for pos > 0 && x[idx[pos-1]] < v {
			idx[pos] = idx[pos-1]
			pos--
		}
		idx[pos] = i
	}
	return idx
}
