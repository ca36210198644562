// Package money is layer0's one representation of an amount of money: an integer count of
// micro-units (millionths) of the configured currency, so that sums never drift as floating point
// does. One dollar is 1,000,000 micro-units; a price of $3 per million tokens is 3 micro-units a
// token. Amounts are written and read as decimals with at most six fractional digits.
package money

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Micros is an amount in micro-units (millionths) of the currency.
type Micros int64

// Unit is one whole unit of the currency (a dollar) in micro-units.
const Unit Micros = 1_000_000

// Parse reads a decimal amount of whole units ("3", "0.30", "1.234567") exactly into micro-units.
// More than six fractional digits, a sign other than a leading '-', exponents and overflow are
// errors: an amount is never rounded silently.
func Parse(s string) (Micros, error) {
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" {
		return 0, errors.New("money: empty amount")
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("money: %q has more than six decimals (a micro-unit is the smallest amount)", s)
	}
	for _, part := range []string{whole, frac} {
		for _, c := range part {
			if c < '0' || c > '9' {
				return 0, fmt.Errorf("money: %q is not a decimal amount", s)
			}
		}
	}
	var w, f int64
	var err error
	if whole != "" {
		if w, err = strconv.ParseInt(whole, 10, 64); err != nil || w > math.MaxInt64/int64(Unit) {
			return 0, fmt.Errorf("money: %q is too large", s)
		}
	}
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	m := Micros(w)*Unit + Micros(f)
	if neg {
		m = -m
	}
	return m, nil
}

// String writes m as a decimal of whole units with six fractional digits ("0.004521").
func (m Micros) String() string {
	var b [24]byte
	return string(m.AppendDecimal(b[:0]))
}

// AppendDecimal appends m as String writes it, without allocating.
func (m Micros) AppendDecimal(dst []byte) []byte {
	u := uint64(m)
	if m < 0 {
		dst, u = append(dst, '-'), uint64(-m)
	}
	dst = strconv.AppendUint(dst, u/uint64(Unit), 10)
	f := u % uint64(Unit)
	dst = append(dst, '.')
	for d := uint64(100000); d > 0; d /= 10 {
		dst = append(dst, byte('0'+f/d%10))
	}
	return dst
}

// PerMillion returns n × rate ÷ 1,000,000 micro-units, rounded up, without overflow: the cost of
// n tokens at rate micro-units per million tokens (or of n nanoseconds at a rate per
// millisecond, and so on). It saturates at the largest amount.
func PerMillion(n int64, rate Micros) Micros {
	return MulDivUp(n, rate, 1_000_000)
}

// MulDivUp returns ⌈a × b ÷ c⌉ for non-negative a, b and positive c, saturating at the largest
// amount; negative inputs count as 0.
func MulDivUp(a int64, b Micros, c int64) Micros {
	if a <= 0 || b <= 0 || c <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return Micros(q)
}

// UnmarshalText reads a decimal amount (Parse): a YAML or JSON number or string.
func (m *Micros) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// MarshalText writes m as String does.
func (m Micros) MarshalText() ([]byte, error) { return []byte(m.String()), nil }
