package peer

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// logLine is one line of gpufabric-scheduler's klog text log: when, the
// message, and its key/value pairs (quoted values unquoted).
type logLine struct {
	at  time.Time
	msg string
	kv  map[string]string
}

// readGangLog returns the lines of the scheduler's log at path about the
// gang key (its gang="…" value), in order. klog's header has no year: the
// lines are taken to be of year.
func readGangLog(path, key string, year int) ([]logLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open scheduler log: %w", err)
	}
	defer f.Close()
	needle := `gang=` + strconv.Quote(key)
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, needle) {
			continue
		}
		if l, ok := parseLogLine(line, year); ok {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read scheduler log: %w", err)
	}
	return out, nil
}

// parseLogLine parses `I1125 15:02:23.123456   123 file.go:1] "msg" k="v" k2=v2`.
func parseLogLine(line string, year int) (logLine, bool) {
	end := strings.Index(line, "] ")
	if len(line) < 21 || end < 0 {
		return logLine{}, false
	}
	at, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
	if err != nil {
		return logLine{}, false
	}
	l := logLine{at: at.AddDate(year, 0, 0), kv: map[string]string{}}
	rest := line[end+2:]
	if q, err := strconv.QuotedPrefix(rest); err == nil {
		l.msg, _ = strconv.Unquote(q)
		rest = rest[len(q):]
	}
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
		k, v, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		if q, err := strconv.QuotedPrefix(v); err == nil {
			l.kv[k], _ = strconv.Unquote(q)
			rest = v[len(q):]
			continue
		}
		val, after, _ := strings.Cut(v, " ")
		l.kv[k], rest = val, after
	}
	return l, true
}

// gangTimeline is what the scheduler's log says of one gang's run.
type gangTimeline struct {
	// notReady attempts: all, those that began after the last create
	// returned, and when the last one was logged.
	notReady, notReadyLate int
	lastNotReady           time.Time
	// waiting-status writes (PodScheduled of the waiting members, the
	// PodGroup condition, an event): how many (cut: cut short when the
	// members arrived), their time, and when the last one ended.
	waitingWrites    int
	cut              int
	waitingWriteTime time.Duration
	lastWaitingWrite time.Time
	// readyStart: the attempt that placed the gang began; placed: Place
	// returned and the commit started.
	readyStart, placed time.Time
	// The commit's phases; bindStart/bindEnd bound the bind phase,
	// committed is the end of the last phase.
	phases                        string
	bindStart, bindEnd, committed time.Time
}

// timelineOf reads a gang's timeline from its log lines; created is when
// the last create returned.
func timelineOf(lines []logLine, created time.Time) gangTimeline {
	var t gangTimeline
	for _, l := range lines {
		switch l.msg {
		case "Gang not ready":
			t.notReady++
			if l.at.After(created) {
				t.notReadyLate++
			}
			t.lastNotReady = l.at
		case "Wrote waiting status", "Waiting status cut short: the gang's members arrived":
			d, _ := time.ParseDuration(l.kv["duration"])
			t.waitingWrites++
			if l.msg != "Wrote waiting status" {
				t.cut++
			}
			t.waitingWriteTime += d
			t.lastWaitingWrite = l.at
		case "Placed gang":
			d, _ := time.ParseDuration(l.kv["attempt"])
			t.placed, t.readyStart = l.at, l.at.Add(-d)
		case "Committed gang":
			t.phases, t.committed = l.kv["phases"], l.at
			t.bindStart, t.bindEnd = commitBindPhase(t.placed, l.kv["phases"])
		}
	}
	return t
}

// commitBindPhase finds the bind phase in "record=12ms pod_claims=1.2s
// bind=0.9s …": the phases run one after the other from start.
func commitBindPhase(start time.Time, phases string) (time.Time, time.Time) {
	at := start
	for _, p := range strings.Fields(phases) {
		name, v, _ := strings.Cut(p, "=")
		d, err := time.ParseDuration(v)
		if err != nil {
			return time.Time{}, time.Time{}
		}
		if name == "bind" {
			return at, at.Add(d)
		}
		at = at.Add(d)
	}
	return time.Time{}, time.Time{}
}

// describe renders the timeline in seconds from start; created is the
// last create, counts what the benchmark's watch observed.
func (t gangTimeline) describe(start, created time.Time, counts podCounts) string {
	s := func(at time.Time) string {
		if at.IsZero() {
			return "?"
		}
		return fmt.Sprintf("%.2f", at.Sub(start).Seconds())
	}
	d := func(a, b time.Time) string {
		if a.IsZero() || b.IsZero() {
			return "?"
		}
		return fmt.Sprintf("%.2f", b.Sub(a).Seconds())
	}
	return fmt.Sprintf("s from the first create: creates done %s; %d not-ready attempts (%d began after the last create, the last at %s), "+
		"%d waiting-status writes (%d cut short; %.2fs, the last ended at %s); ready attempt %s, placed %s, bind phase %s–%s, commit done %s (%s); "+
		"observed bound: first %s, all %s. Last create → all bound: to the ready attempt %s, placement %s, record+claims %s, binds %s, binds → observed all %s",
		s(created), t.notReady, t.notReadyLate, s(t.lastNotReady), t.waitingWrites, t.cut, t.waitingWriteTime.Seconds(), s(t.lastWaitingWrite),
		s(t.readyStart), s(t.placed), s(t.bindStart), s(t.bindEnd), s(t.committed), t.phases,
		s(counts.firstBound), s(counts.allBound),
		d(created, t.readyStart), d(t.readyStart, t.placed), d(t.placed, t.bindStart), d(t.bindStart, t.bindEnd), d(t.bindEnd, counts.allBound))
}
