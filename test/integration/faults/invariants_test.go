package faults

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// watchInvariants checks twice a second until ctx ends: no device is
// allocated twice; no gang in disruption mode All runs partly (some live
// members bound, not all) for longer than allSettle.
func watchInvariants(ctx context.Context, t *testing.T, admin kubernetes.Interface) {
	partSince := map[string]time.Time{}
	for ctx.Err() == nil {
		if dup, err := itest.DevicesAllocatedTwice(ctx, admin); err == nil && len(dup) > 0 {
			t.Errorf("VIOLATION: devices allocated twice: %v", dup)
		}
		for _, c := range faultCases {
			if !c.all {
				continue
			}
			g, err := readGang(ctx, admin, c.name)
			if err != nil {
				continue // read again next time
			}
			if b := g.bound(); b == 0 || b == c.pods && len(g.live) == c.pods {
				delete(partSince, c.name)
				continue
			}
			first, ok := partSince[c.name]
			switch {
			case !ok:
				partSince[c.name] = time.Now()
			case time.Since(first) > allSettle:
				t.Errorf("VIOLATION: gang %s (disruption mode All) runs partly for %s: %s", c.name, since(first), g)
				partSince[c.name] = time.Now() // again only after another settle time
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// replacementMetric is the histogram of the time from a member's loss to
// its replacement bound (or the gang restarted or failed).
const replacementMetric = "gpufabric_scheduler_member_replacement_seconds"

// checkReplacementMetric scrapes the scheduler: every case's trigger and
// outcome was observed; logs each series' count and mean.
func checkReplacementMetric(t *testing.T, addr, token string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	code, body, err := itest.EndpointGet(ctx, addr, "/metrics", token)
	if err != nil || code != http.StatusOK {
		t.Fatalf("scrape the scheduler's metrics: %d %v", code, err)
	}
	counts, sums := histogram(body, replacementMetric)
	for key, n := range counts {
		t.Logf("faults: %s{%s} count=%v mean=%.1fs", replacementMetric, key, n, sums[key]/n)
	}
	for _, c := range faultCases {
		key := fmt.Sprintf(`outcome="%s",trigger="%s"`, c.outcomeLabel(), c.trigger)
		if counts[key] < 1 {
			t.Errorf("case %s: no %s{%s} observed; series %v", c.name, replacementMetric, key, counts)
		}
	}
}

// histogram reads name's _count and _sum series from a text exposition,
// keyed by their labels (sorted as Prometheus writes them).
func histogram(body []byte, name string) (counts, sums map[string]float64) {
	counts, sums = map[string]float64{}, map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		for suffix, into := range map[string]map[string]float64{"_count{": counts, "_sum{": sums} {
			rest, ok := strings.CutPrefix(line, name+suffix)
			if !ok {
				continue
			}
			labels, value, ok := strings.Cut(rest, "} ")
			if v, err := strconv.ParseFloat(value, 64); ok && err == nil {
				into[labels] = v
			}
		}
	}
	return counts, sums
}
