package inspect

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// RenderExplain prints an ExplainReport: a header (state and summary,
// Job, minCount, topology key), the conditions with their whole messages,
// the members by rank, why the unplaced members wait, the shared claims
// and the last events.
func RenderExplain(w io.Writer, r *ExplainReport, st Style) error {
	t := newTable(w)
	t.row("PodGroup:", r.Namespace+"/"+r.Name)
	if r.Job != "" {
		t.row("Job:", r.Job)
	}
	if r.Workload != "" {
		t.row("Found via:", r.Workload)
	}
	for i, line := range r.Tree {
		t.row(map[bool]string{true: "Tree:"}[i == 0], line)
	}
	t.row("State:", r.State+": "+r.Summary)
	if q := r.Queue; q != nil {
		t.row("Queue:", fmt.Sprintf("%d of %d waiting (priority %d, waiting %s)", q.Position, q.Of, q.Priority, age(st.Now, q.Created)))
	}
	if r.State != StateNotFound {
		t.row("Topology:", orNone(r.TopologyKey))
	}
	if r.Segments != "" {
		t.row("Segments:", r.Segments)
	}
	if err := t.flush(); err != nil {
		return err
	}
	renderConditions(w, r.Conditions)
	if err := renderMembers(w, r); err != nil {
		return err
	}
	renderWaits(w, r.Members)
	if err := renderClaims(w, r.SharedClaims); err != nil {
		return err
	}
	if err := renderEvents(w, r.Events, st); err != nil {
		return err
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "Warning: %s\n", warn)
	}
	return nil
}

// RenderExplainList prints each report, separated by an empty line.
func RenderExplainList(w io.Writer, l ExplainList, st Style) error {
	for i, r := range l.Items {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := RenderExplain(w, r, st); err != nil {
			return err
		}
	}
	return nil
}

// renderConditions prints each condition as "Type=Status (Reason):" and its
// message indented, every line of it.
func renderConditions(w io.Writer, conds []Condition) {
	if len(conds) == 0 {
		return
	}
	fmt.Fprintln(w, "Conditions:")
	for _, c := range conds {
		fmt.Fprintf(w, "  %s=%s (%s):\n", c.Type, c.Status, orNone(c.Reason))
		writeIndented(w, "    ", c.Message)
	}
}

func writeIndented(w io.Writer, indent, text string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(w, "%s%s\n", indent, line)
	}
}

func renderMembers(w io.Writer, r *ExplainReport) error {
	fmt.Fprintln(w)
	if len(r.Members) == 0 {
		_, err := fmt.Fprintln(w, "Members: <none>")
		return err
	}
	fmt.Fprintln(w, "Members:")
	t := newTable(w)
	header := []string{"  RANK", "POD", "NODE"}
	for _, l := range r.Levels {
		header = append(header, levelHeader(l))
	}
	t.row(append(header, "PHASE", "DEVICES", "RAILS", "SCHEDULED")...)
	for _, m := range r.Members {
		cells := []string{"  " + orDash(m.Rank), m.Pod, orNone(m.Node)}
		for i := range r.Levels {
			v := "-"
			if i < len(m.Placement) {
				v = orNone(m.Placement[i])
			}
			cells = append(cells, v)
		}
		devices, rails := "-", "-"
		if m.Node != "" {
			devices, rails = devicesOn(m.Node, m.Devices), compactInts(m.Rails)
		}
		t.row(append(cells, orNone(m.Phase), devices, rails, scheduled(m))...)
	}
	return t.flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// devicesOn writes devices compactly, without the pool when it is the
// node's own.
func devicesOn(node string, devices []string) string {
	names := make([]string, 0, len(devices))
	for _, d := range devices {
		names = append(names, strings.TrimPrefix(d, node+"/"))
	}
	return compactNames(names)
}

func scheduled(m MemberInfo) string {
	switch {
	case m.Scheduled == nil && len(m.Gates) > 0:
		return "Gated"
	case m.Scheduled == nil:
		return none
	case m.Scheduled.Status == "True":
		return "True"
	}
	return orNone(m.Scheduled.Reason)
}

// renderWaits prints why unplaced members wait: their PodScheduled reason
// and message, members with the same ones together, and their gates.
func renderWaits(w io.Writer, members []MemberInfo) {
	type wait struct {
		pods           []string
		reason, detail string
	}
	var waits []*wait
	byKey := map[string]*wait{}
	for _, m := range members {
		if m.Node != "" || (m.Scheduled == nil || m.Scheduled.Status == "True") && len(m.Gates) == 0 {
			continue
		}
		reason, detail := "Gated", ""
		if m.Scheduled != nil && m.Scheduled.Status != "True" {
			reason, detail = m.Scheduled.Reason, m.Scheduled.Message
		}
		if len(m.Gates) > 0 {
			detail = strings.TrimSpace(detail + "\n(gates: " + strings.Join(m.Gates, ", ") + ")")
		}
		key := reason + "\x00" + detail
		if byKey[key] == nil {
			byKey[key] = &wait{reason: reason, detail: detail}
			waits = append(waits, byKey[key])
		}
		byKey[key].pods = append(byKey[key].pods, m.Pod)
	}
	if len(waits) == 0 {
		return
	}
	fmt.Fprintln(w, "Why members wait (PodScheduled):")
	for _, wt := range waits {
		fmt.Fprintf(w, "  %s: %s:\n", compactNames(wt.pods), orNone(wt.reason))
		writeIndented(w, "    ", orNone(wt.detail))
	}
}

func renderClaims(w io.Writer, claims []ClaimInfo) error {
	if len(claims) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Shared claims:")
	t := newTable(w)
	t.row("  ENTRY", "CLAIM", "DEVICES", "RESERVED FOR")
	for _, c := range claims {
		devices := none
		if len(c.Devices) > 0 {
			devices = strings.Join(c.Devices, ",")
		} else if c.Name != "" {
			devices = "<not allocated>"
		}
		t.row("  "+c.Entry, orDefault(c.Name, "<not created>"), devices, orNone(strings.Join(c.ReservedFor, ",")))
	}
	return t.flush()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func renderEvents(w io.Writer, events []EventInfo, st Style) error {
	fmt.Fprintln(w)
	if len(events) == 0 {
		_, err := fmt.Fprintln(w, "Events: <none>")
		return err
	}
	fmt.Fprintln(w, "Events:")
	t := newTable(w)
	t.row("  LAST SEEN", "TYPE", "REASON", "COUNT", "FROM", "MESSAGE")
	for _, e := range events {
		t.row("  "+age(st.Now, e.LastSeen), e.Type, e.Reason, strconv.Itoa(int(e.Count)), orNone(e.From), firstLine(e.Note, 200))
	}
	return t.flush()
}

// RenderGroups prints one row per PodGroup; withNamespace adds the
// namespace column (all namespaces).
func RenderGroups(w io.Writer, r *GroupSummary, withNamespace bool) error {
	if len(r.Groups) == 0 {
		_, err := fmt.Fprintln(w, "No PodGroups found.")
		return err
	}
	t := newTable(w)
	header := []string{"PODGROUP", "STATE", "BOUND", "MINCOUNT", "NVLINK DOMAINS", "REASON", "MESSAGE"}
	if withNamespace {
		header = append([]string{"NAMESPACE"}, header...)
	}
	t.row(header...)
	for _, g := range r.Groups {
		cells := []string{g.Name, g.State, fmt.Sprintf("%d/%d", g.Bound, g.Members), strconv.Itoa(int(g.MinCount)),
			orNone(strings.Join(g.Domains, ",")), orNone(g.Reason), firstLine(orNone(g.Message), 100)}
		if withNamespace {
			cells = append([]string{g.Namespace}, cells...)
		}
		t.row(cells...)
	}
	return t.flush()
}
