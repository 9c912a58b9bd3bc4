package devices

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// maxLabelValueLength is the API's limit for a taint value (a label value).
const maxLabelValueLength = 63

// newTaint returns a NoSchedule device taint whose value is reason made into
// a valid label value (see labelValue).
func newTaint(key, reason string) resourceapi.DeviceTaint {
	return resourceapi.DeviceTaint{
		Key:    key,
		Value:  labelValue(reason),
		Effect: resourceapi.DeviceTaintEffectNoSchedule,
	}
}

// labelValue turns free text into a readable label value: characters other
// than letters, digits, '-', '_' and '.' become '-', runs of '-' collapse,
// the ends are trimmed to alphanumerics and the result is cut to 63
// characters ("2 of 18 nvlinks down" -> "2-of-18-nvlinks-down").
func labelValue(s string) string {
	var b strings.Builder
	for _, r := range s {
		ok := r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.')
		switch {
		case ok:
			b.WriteRune(r)
		case !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	v := b.String()
	if len(v) > maxLabelValueLength {
		v = v[:maxLabelValueLength]
	}
	return strings.TrimFunc(v, func(r rune) bool {
		return r >= 128 || !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
}
