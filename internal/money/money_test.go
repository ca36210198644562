package money

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]Micros{"3": 3_000_000, "0.30": 300_000, "1.234567": 1_234_567, ".5": 500_000,
		"15.00": 15_000_000, "-2.5": -2_500_000, "0": 0, "0.000001": 1} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1.2345678", "1e6", "abc", "1.2.3", "99999999999999999"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) took it; want an error", in)
		}
	}
}

func TestString(t *testing.T) {
	for m, want := range map[Micros]string{0: "0.000000", 1: "0.000001", 3_000_000: "3.000000", -2_500_000: "-2.500000",
		1_234_567: "1.234567"} {
		if got := m.String(); got != want {
			t.Errorf("%d.String() = %q; want %q", int64(m), got, want)
		}
	}
}

func TestMulDivUp(t *testing.T) {
	// 1,000 tokens at 3.000000 per million: exactly 3,000 micro-units; one token at 0.30 per
	// million is 0.3 micro-units, rounded up to 1.
	if got := PerMillion(1000, 3_000_000); got != 3000 {
		t.Errorf("PerMillion(1000, 3.00) = %d; want 3000", got)
	}
	if got := PerMillion(1, 300_000); got != 1 {
		t.Errorf("PerMillion(1, 0.30) = %d; want 1 (rounded up)", got)
	}
	if got := MulDivUp(1<<62, 1<<40, 1); got <= 0 {
		t.Errorf("overflow: %d; want the largest amount", got)
	}
}
