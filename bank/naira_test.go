package bank_test

import (
	"math"
	"testing"

	"github.com/banksim/bank-sim/bank"
)

func TestNaira(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		kobo int64
		want string
	}{
		{"zero", 0, "₦0"},
		{"one naira", 100, "₦1"},
		{"ada's opening balance", 5_000_000, "₦50,000"},
		{"bank total", 7_500_000, "₦75,000"},
		{"grouping and kobo", 123456789, "₦1,234,567.89"},
		{"five kobo keeps the leading zero", 5, "₦0.05"},
		{"fifty kobo keeps the trailing zero", 150, "₦1.50"},
		{"exactly a thousand naira", 100_000, "₦1,000"},
		{"just under a thousand naira", 99_999, "₦999.99"},
		{"negative", -500_000, "₦-5,000"},
		{"negative with kobo", -5, "₦-0.05"},
		{"largest int64", math.MaxInt64, "₦92,233,720,368,547,758.07"},
		{"smallest int64 does not overflow", math.MinInt64, "₦-92,233,720,368,547,758.08"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bank.Naira(tt.kobo); got != tt.want {
				t.Errorf("Naira(%d) = %q, want %q", tt.kobo, got, tt.want)
			}
		})
	}
}
