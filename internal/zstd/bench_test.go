package zstd

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkDecode measures DecodeAll on 8 MiB of perf-like records, text
// and binary compressed with `zstd -3`; MB/s counts decompressed bytes.
func BenchmarkDecode(b *testing.B) {
	needCLI(b)
	r := rand.New(rand.NewPCG(41, 42))
	data := append(perfLike(r, 4<<20), repetitiveText(r, 2<<20)...)
	data = append(data, mixedBinary(b, 2<<20)...)
	for _, level := range []string{"-1", "-3", "-19"} {
		if level == "-19" && testing.Short() {
			continue
		}
		comp := compress(b, data, false, level)
		b.Run("level"+level, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportMetric(float64(len(data))/float64(len(comp)), "ratio")
			dst := make([]byte, 0, len(data))
			for b.Loop() {
				var err error
				dst, err = DecodeAll(dst[:0], comp)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
