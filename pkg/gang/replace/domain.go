package replace

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// phraseDomain precedes the quoted id of a restarting whole gang's
// previous NVLink domain in the MembersLost condition's message, read back
// after a scheduler restart.
const phraseDomain = "previous NVLink domain "

// maxDomainID bounds a domain id read back from a condition (attribute
// values are at most 64 characters).
const maxDomainID = 64

// Prefer returns the nodes whose domain a restarting gang should go back
// to when it fits, nil for none; after a scheduler restart, the nodes of
// the previous domain its condition names.
func (r *Replacer) Prefer(key string) []string {
	r.mu.Lock()
	st := r.gangs[key]
	var domain string
	if st != nil && len(st.prefer) == 0 {
		domain = st.domain
	}
	r.mu.Unlock()
	if st == nil {
		return nil
	}
	var nodes []string
	if domain != "" {
		nodes = r.nodesOf(domain) // outside the lock: the tree may be built again
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(st.prefer) == 0 {
		st.prefer = nodes
	}
	return slices.Clone(st.prefer)
}

// nvlink is the NVLink level of the fabric tree (Deps.Tree), nil when
// unknown.
func (r *Replacer) nvlink() *topology.Level {
	if r.d.Tree == nil {
		return nil
	}
	t, err := r.d.Tree()
	if err != nil || t == nil {
		return nil
	}
	return t.Level(topology.TopologyKeyNVLinkDomain)
}

// domainOf is the NVLink domain all nodes are in, "" when they are in
// several, in none or the tree is unknown.
func (r *Replacer) domainOf(nodes []string) string {
	l := r.nvlink()
	if l == nil || len(nodes) == 0 {
		return ""
	}
	var id string
	for i, n := range nodes {
		d := l.DomainOf(n)
		if d == nil || i > 0 && d.ID != id {
			return ""
		}
		id = d.ID
	}
	return id
}

// nodesOf are the nodes of NVLink domain id (at most maxPrefer), nil when
// it is unknown.
func (r *Replacer) nodesOf(id string) []string {
	l := r.nvlink()
	if l == nil || id == "" {
		return nil
	}
	d := l.Domain(id)
	if d == nil {
		return nil
	}
	return slices.Clone(d.Nodes[:min(len(d.Nodes), maxPrefer)])
}

// domainPhrase is the condition's words for a previous domain, "" for
// none.
func domainPhrase(id string) string {
	if id == "" {
		return ""
	}
	return fmt.Sprintf("; %s%q", phraseDomain, id)
}

// domainIn finds the previous domain a condition's message names (the
// first phrase, quoted, at most maxDomainID long), "" for none.
func domainIn(msg string) string {
	i := strings.Index(msg, phraseDomain)
	if i < 0 {
		return ""
	}
	rest := msg[i+len(phraseDomain):]
	rest = rest[:min(len(rest), 4*maxDomainID+2)] // the longest quoting of an id
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return ""
	}
	id, err := strconv.Unquote(q)
	if err != nil || len(id) > maxDomainID {
		return ""
	}
	return id
}
