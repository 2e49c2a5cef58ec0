package chat

import (
	"strconv"
	"strings"
	"time"
)

// strftime formats tm with a C/Python strftime format. It supports the
// directives chat templates use (%d %b %Y and friends) plus glibc's "-"
// flag that drops zero padding (%-d); unknown directives are kept verbatim,
// as Python does.
func strftime(tm time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		pad := true
		if format[i] == '-' && i+1 < len(format) {
			pad = false
			i++
		}
		num := func(n, width int) {
			s := strconv.Itoa(n)
			if pad {
				for k := len(s); k < width; k++ {
					b.WriteByte('0')
				}
			}
			b.WriteString(s)
		}
		switch format[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(tm.Year()))
		case 'y':
			num(tm.Year()%100, 2)
		case 'm':
			num(int(tm.Month()), 2)
		case 'd':
			num(tm.Day(), 2)
		case 'e':
			if pad && tm.Day() < 10 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.Itoa(tm.Day()))
		case 'j':
			num(tm.YearDay(), 3)
		case 'H':
			num(tm.Hour(), 2)
		case 'I':
			h := tm.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(tm.Minute(), 2)
		case 'S':
			num(tm.Second(), 2)
		case 'p':
			if tm.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'B':
			b.WriteString(tm.Month().String())
		case 'b', 'h':
			b.WriteString(tm.Month().String()[:3])
		case 'A':
			b.WriteString(tm.Weekday().String())
		case 'a':
			b.WriteString(tm.Weekday().String()[:3])
		case 'Z':
			name, _ := tm.Zone()
			b.WriteString(name)
		case 'z':
			b.WriteString(tm.Format("-0700"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if !pad {
				b.WriteByte('-')
			}
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
