package tensor_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// fp4 returns the e2m1 nibble's value from the format's definition: sign
// bit 3, exponent bits 2-1 (bias 1), mantissa bit 0; exponent 0 is the
// subnormal 0.m·2^0.
func fp4(n uint8) float64 {
	e, m := float64(n>>1&3), float64(n&1)
	v := m / 2
	if e > 0 {
		v = (1 + m/2) * math.Pow(2, e-1)
	}
	if n&8 != 0 {
		return -v
	}
	return v
}

// mxfp4Ref returns value i of an MXFP4 matrix's row-major values from its
// blocks and scales as the checkpoint format defines them, in float64.
func mxfp4Ref(blocks, scales []uint8, i int) float64 {
	b := blocks[i/2]
	n := b & 15
	if i%2 == 1 {
		n = b >> 4
	}
	return fp4(n) * math.Ldexp(1, int(scales[i/32])-127)
}

// TestMXFP4Values: the e2m1 values are the format's table, and every nibble
// in both positions of a byte, under scales from the subnormal 2^-127 to
// MXFP4MaxScale (127 ± 10 among them), dequantizes exactly (Row,
// MXFP4ToF32, Float32, MXFP4Value) to the float64 definition.
func TestMXFP4Values(t *testing.T) {
	table := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6}
	for n, want := range table {
		if got := fp4(uint8(n)); got != want || math.Signbit(got) != (n >= 8) {
			t.Fatalf("fp4(%d) = %v, want %v", n, got, want)
		}
	}
	scales := []uint8{0, 1, 2, 100, 117, 126, 127, 128, 137, 200, 250, tensor.MXFP4MaxScale}
	// Row r: every byte value 0..255 once (16 blocks of 16 bytes: each
	// nibble in both positions beside every other), each block under its
	// own scale.
	const cols = 512
	rows := len(scales)
	blocks := make([]uint8, rows*cols/2)
	sc := make([]uint8, rows*cols/32)
	for r := range rows {
		for i := range cols / 2 {
			blocks[r*cols/2+i] = uint8(i + 37*r)
		}
		for b := range cols / 32 {
			sc[r*cols/32+b] = scales[(r+b)%len(scales)]
		}
	}
	m, err := tensor.MXFP4Matrix(blocks, sc, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	if m.DType != tensor.MXFP4 || m.Bytes() != int64(len(blocks)+len(sc)) || m.DType.String() != "mxfp4" {
		t.Fatalf("matrix %s of %d bytes, want mxfp4 of %d", m.DType, m.Bytes(), len(blocks)+len(sc))
	}
	check := func(what string, got []float32, off int) {
		t.Helper()
		for i, g := range got {
			want := mxfp4Ref(blocks, sc, off+i)
			if float64(g) != want || math.Signbit(float64(g)) != math.Signbit(want) {
				t.Fatalf("%s: value %d is %v, want %v", what, off+i, g, want)
			}
		}
	}
	all := make([]float32, rows*cols)
	tensor.MXFP4ToF32(all, blocks, sc)
	check("MXFP4ToF32", all, 0)
	check("Float32", m.Float32(), 0)
	row := make([]float32, cols)
	for r := range rows {
		m.Row(row, r)
		check("Row", row, r*cols)
		sub := m.RowRange(r, rows)
		sub.Row(row, 0)
		check("RowRange then Row", row, r*cols)
	}
	for s := range 256 {
		if s > tensor.MXFP4MaxScale {
			break
		}
		for n := range 16 {
			if got, want := tensor.MXFP4Value(uint8(n), uint8(s)), fp4(uint8(n))*math.Ldexp(1, s-127); float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
				t.Fatalf("MXFP4Value(%d, %d) = %v, want %v", n, s, got, want)
			}
		}
	}
	// A large slice, split over the workers, gives the same values.
	r := rand.New(rand.NewPCG(1, 2))
	big := make([]uint8, 1<<20)
	bs := make([]uint8, len(big)/16)
	for i := range big {
		big[i] = uint8(r.Uint32())
	}
	for i := range bs {
		bs[i] = uint8(117 + r.IntN(21))
	}
	out := make([]float32, 2*len(big))
	tensor.MXFP4ToF32(out, big, bs)
	for i, g := range out {
		if want := mxfp4Ref(big, bs, i); float64(g) != want {
			t.Fatalf("large MXFP4ToF32: value %d is %v, want %v", i, g, want)
		}
	}
}

// TestMXFP4MatrixErrors: MXFP4Matrix refuses columns that are not whole
// blocks, lengths that do not match the shape and scales whose values would
// overflow float32, naming the offending scale's row and block.
func TestMXFP4MatrixErrors(t *testing.T) {
	blocks, scales := make([]uint8, 4*64/2), make([]uint8, 4*64/32)
	for _, c := range []struct {
		name           string
		blocks, scales []uint8
		rows, cols     int
		want           string
	}{
		{"cols", blocks, scales, 8, 32 + 16, "multiple of 32"},
		{"blocks", blocks[1:], scales, 4, 64, "bytes of blocks"},
		{"scales", blocks, scales[:7], 4, 64, "bytes of blocks"},
		{"scale", blocks, []uint8{127, 127, 127, 127, 127, 253, 127, 127}, 4, 64, "scale 253 (2^126) of row 2, block 1"},
	} {
		if _, err := tensor.MXFP4Matrix(c.blocks, c.scales, c.rows, c.cols); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
	if m, err := tensor.MXFP4Matrix(blocks, scales, 4, 64); err != nil || m.Rows != 4 || m.Cols != 64 || m.Len() != 256 || m.Bytes() != 136 {
		t.Fatalf("a valid matrix: %v, %dx%d of %d bytes", err, m.Rows, m.Cols, m.Bytes())
	}
	if m, err := tensor.MXFP4Matrix(nil, nil, 0, 64); err != nil || !m.Empty() {
		t.Fatalf("an empty matrix: %v", err)
	}
}
