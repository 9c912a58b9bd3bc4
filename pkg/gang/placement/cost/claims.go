package cost

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	resourceapi "k8s.io/api/resource/v1"
)

// MaxNameLen bounds a claim name in what the engine writes (messages):
// longer names are cut there and end in "…".
const MaxNameLen = 63

// ShortName is a name cut to MaxNameLen runes ("…" ends a cut name).
func ShortName(name string) string {
	if utf8.RuneCountInString(name) <= MaxNameLen {
		return name
	}
	r := []rune(name)
	return string(r[:MaxNameLen-1]) + "…"
}

// Weight is how much CEL a claim gives the allocator to evaluate per
// device: the summed length of its requests' selector expressions
// (exactly and firstAvailable), plus one per request.
func Weight(c *resourceapi.ResourceClaim) int {
	w := 0
	sels := func(ss []resourceapi.DeviceSelector) {
		for _, s := range ss {
			if s.CEL != nil {
				w += len(s.CEL.Expression)
			}
		}
	}
	for _, r := range c.Spec.Devices.Requests {
		w++
		if r.Exactly != nil {
			sels(r.Exactly.Selectors)
		}
		for _, sub := range r.FirstAvailable {
			sels(sub.Selectors)
		}
	}
	return w
}

// ClaimDigest names a claim by what the allocator reads of it: its
// namespace, name and spec, hashed.
func ClaimDigest(c *resourceapi.ResourceClaim) (string, error) {
	raw, err := json.Marshal(c.Spec)
	if err != nil {
		return "", fmt.Errorf("claim %s/%s: %w", c.Namespace, ShortName(c.Name), err)
	}
	sum := sha256.Sum256(append([]byte(c.Namespace+"/"+c.Name+"\x00"), raw...))
	return hex.EncodeToString(sum[:16]), nil
}
