package bench

import (
	"context"
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The device's ceilings, measured in the same run as the table, and the
// shares of them that the decode and prefill rows reach: what the GPU goals
// of issue 26 are stated in (decode at batch 1 against the bandwidth
// roofline, prefill against the product rate).
const (
	RowCopy        = "copy bandwidth"
	RowProducts    = "product rate"
	RowDecodeRoof  = "decode, batch 1, of the roofline"
	RowPrefillRoof = "prefill, batch 32, of the product rate"
	unitGBs        = "GB/s"
	unitTFLOPs     = "TFLOP/s"
	unitPercent    = "%"
)

// ceilingRows measures the device's copy bandwidth and the rate of its
// products over a weight of the shape's widest matrix (intermediate x
// hidden, in the run's dtype), then the decode and prefill rows as shares
// of them. It runs after forwardRows, whose rows it reads.
func (r *runner) ceilingRows(ctx context.Context) error {
	o, m := r.o, r.m
	dev := m.Device()
	o.logf("bench: the device's copy bandwidth and product rate")
	// A device of its own (a GPU) copies 256 MiB per call, so that the
	// launch is noise; the host 64 MiB, past every cache.
	cols, rows, prodRows := 1024, 16<<10, 512
	if !m.HostMemory() {
		rows, prodRows = 64<<10, 4096
	}
	src, err := dev.Alloc(tensor.F32, rows, cols)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	dst, err := dev.Alloc(tensor.F32, rows, cols)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	probe := make([]float32, cols)
	const copies = 4
	sec, err := best(o.Iters+1, func() error {
		for range copies {
			dev.Copy(dst, src)
		}
		dev.Read(probe, dst.RowRange(0, 1)) // waits for the copies
		return ctx.Err()
	})
	if err != nil {
		return err
	}
	bytes := float64(rows) * float64(cols) * 4
	bw := copies * 2 * bytes / sec // read and written
	r.add(RowCopy, bw/1e9, unitGBs, fmt.Sprintf("device-to-device copy of %d MiB, read and written, %d per timing, best of %d", int(bytes)>>20, copies, o.Iters+1))

	n, k := r.cfg.IntermediateSize, r.cfg.HiddenSize
	w, err := randomWeight(o.DType, n, k, o.Seed+9)
	if err != nil {
		return err
	}
	dev.PrepareWeights(&w)
	x, err := dev.Alloc(tensor.F32, prodRows, k)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	dev.Write(x, randomF32(prodRows*k, o.Seed+10, 1))
	out, err := dev.Alloc(tensor.F32, prodRows, n)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	probe = make([]float32, n)
	sec, err = best(o.Iters+1, func() error {
		dev.MulT(out, x, &w, false)
		dev.Read(probe, out.RowRange(0, 1))
		return ctx.Err()
	})
	if err != nil {
		return err
	}
	rate := 2 * float64(prodRows) * float64(n) * float64(k) / sec
	r.add(RowProducts, rate/1e12, unitTFLOPs, fmt.Sprintf("%d rows by a %dx%d %s weight (MulT, the GEMM path of prefill and capture), best of %d", prodRows, n, k, o.DType, o.Iters+1))

	// Decode at batch 1 reads every weight once per token but the
	// embedding's (one row gathered), unless the lm_head is the embedding.
	var weights int64
	for _, b := range m.Memory().Bytes {
		weights += b
	}
	perToken := weights
	if !r.cfg.TieWordEmbeddings {
		perToken -= m.Embed.Bytes()
	}
	dec, pre := r.value(RowDecode1), r.value(RowPrefill32)
	r.add(RowDecodeRoof, 100*dec*float64(perToken)/bw, unitPercent,
		fmt.Sprintf("decode batch 1's tokens/s x %.3g GB of weights read per token, over the copy bandwidth", float64(perToken)/1e9))
	// Prefill multiplies every row by the layers' matrices (2 FLOP a
	// parameter) and the last row by the lm_head; attention's scores are
	// left out, so the share is a floor.
	V, H := int64(r.cfg.VocabSize), int64(r.cfg.HiddenSize)
	layerParams := r.cfg.NumParams() - V*H
	if !r.cfg.TieWordEmbeddings {
		layerParams -= V * H
	}
	r.add(RowPrefillRoof, 100*pre*2*float64(layerParams)/rate, unitPercent,
		fmt.Sprintf("prefill batch 32's tokens/s x 2 FLOP x %.3gB layer parameters (attention scores left out), over the product rate", float64(layerParams)/1e9))
	return nil
}

// value returns the value of the row named name, 0 when there is none.
func (r *runner) value(name string) float64 {
	for _, row := range r.tb.Rows {
		if row.Name == name {
			return row.Value
		}
	}
	return 0
}

// randomWeight returns an [n, k] weight of dtype dt with values of
// standard deviation about 0.02.
func randomWeight(dt tensor.DType, n, k int, seed uint64) (tensor.Weight, error) {
	v := randomF32(n*k, seed, 0.02)
	switch dt {
	case tensor.F32:
		return tensor.WeightOf(tensor.F32Matrix(v, n, k)), nil
	case tensor.BF16, tensor.F16:
		h := make([]uint16, len(v))
		if dt == tensor.BF16 {
			tensor.F32ToBF16(h, v)
		} else {
			tensor.F32ToF16(h, v)
		}
		return tensor.WeightOf(tensor.HalfMatrix(dt, h, n, k)), nil
	}
	return tensor.Weight{}, fmt.Errorf("bench: no %s weights", dt)
}
