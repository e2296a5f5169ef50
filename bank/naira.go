package bank

import "strconv"

// Naira formats kobo as the lesson prints money: "₦40,000", "₦1,234.50",
// "₦-5,000". It works on integers throughout; money never meets a float.
func Naira(kobo int64) string {
	sign := ""
	// Negate in uint64 so that math.MinInt64 does not overflow.
	u := uint64(kobo)
	if kobo < 0 {
		sign = "-"
		u = -u
	}
	whole, frac := u/100, u%100
	s := "₦" + sign + groupThousands(strconv.FormatUint(whole, 10))
	if frac != 0 {
		s += "." + strconv.FormatUint(frac/10, 10) + strconv.FormatUint(frac%10, 10)
	}
	return s
}

func groupThousands(digits string) string {
	if len(digits) <= 3 {
		return digits
	}
	out := make([]byte, 0, len(digits)+len(digits)/3)
	head := len(digits) % 3
	if head > 0 {
		out = append(out, digits[:head]...)
	}
	for i := head; i < len(digits); i += 3 {
		if len(out) > 0 {
			out = append(out, ',')
		}
		out = append(out, digits[i:i+3]...)
	}
	return string(out)
}
