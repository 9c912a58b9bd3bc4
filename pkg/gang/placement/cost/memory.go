package cost

import (
	"crypto/sha256"
	"encoding/binary"
)

// Verdict is an Allocate answer worth remembering.
type Verdict uint8

const (
	// Unknown: nothing remembered.
	Unknown Verdict = iota
	// Refused: the claims do not fit. Keyed by the node's free devices by
	// content (index.FreeDeviceKey): the same on every node with that key.
	Refused
	// TimedOut: the call ran out of index.Config.AllocateTimeout. Keyed by
	// the node's device shapes (index.ShapeKey): expected on every node
	// with that key.
	TimedOut
)

// MaxEntries bounds the verdicts one Memory holds. A timeout counts only
// once TimedOutConfirmations calls of the same claims on nodes of the same
// shape ran out of time (one may be the machine: a GC pause, a throttled
// CPU; a claim that is too dear for the shape runs out every time), and
// is remembered for TimedOutAttempts attempts after the last one (then
// its nodes are tried again).
const (
	MaxEntries            = 256
	TimedOutConfirmations = 2
	TimedOutAttempts      = 4
)

// Key names one remembered call: the claims (ClaimDigest, in call order)
// and the node's key, hashed to a fixed size so that a Memory's size does
// not depend on what tenants write.
type Key [16]byte

// KeyOf hashes the parts (each length-prefixed, so no two lists collide by
// concatenation).
func KeyOf(parts ...string) Key {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var k Key
	copy(k[:], h.Sum(nil))
	return k
}

type entry struct {
	verdict Verdict
	attempt int
	claim   string
	hits    int // calls that gave the verdict
}

// Memory is one gang's memory of Allocate calls that were refused or ran
// out of time, across its attempts (see the package rules). The zero
// value is not usable; call NewMemory. Not safe for concurrent use.
type Memory struct {
	env     string
	attempt int
	entries map[Key]entry
	// order: keys in the order they were recorded (may hold keys dropped
	// since), for the bound.
	order []Key
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{entries: map[Key]entry{}} }

// Begin starts an attempt on a snapshot whose Allocate answers depend on
// env (index.Snapshot.AllocatorKey) besides nodes and claims: a different
// env forgets every verdict; timeouts recorded TimedOutAttempts attempts
// ago or more are forgotten.
func (m *Memory) Begin(env string) {
	m.attempt++
	if env != m.env {
		m.env = env
		clear(m.entries)
		m.order = m.order[:0]
		return
	}
	keep := m.order[:0]
	for _, k := range m.order {
		e, ok := m.entries[k]
		if ok && e.verdict == TimedOut && m.attempt-e.attempt >= TimedOutAttempts {
			delete(m.entries, k)
			ok = false
		}
		if ok {
			keep = append(keep, k)
		}
	}
	m.order = keep
}

// Lookup returns the verdict for k (Unknown: none, or a timeout not
// confirmed yet) and the claim it was charged to.
func (m *Memory) Lookup(k Key) (Verdict, string) {
	e, ok := m.entries[k]
	if !ok || e.verdict == TimedOut && e.hits < TimedOutConfirmations {
		return Unknown, ""
	}
	return e.verdict, e.claim
}

// Record remembers a verdict charged to claim (a timeout counts towards
// TimedOutConfirmations); at MaxEntries the oldest verdict is dropped
// first.
func (m *Memory) Record(k Key, v Verdict, claim string) {
	if v == Unknown {
		return
	}
	e, ok := m.entries[k]
	if !ok {
		for len(m.entries) >= MaxEntries && len(m.order) > 0 {
			delete(m.entries, m.order[0])
			m.order = m.order[1:]
		}
		m.order = append(m.order, k)
	}
	hits := 1
	if ok && e.verdict == v {
		hits = e.hits + 1
	}
	m.entries[k] = entry{verdict: v, attempt: m.attempt, claim: claim, hits: hits}
}

// Len returns how many verdicts the Memory holds.
func (m *Memory) Len() int { return len(m.entries) }
