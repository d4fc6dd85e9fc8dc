// Package audit is the account's audit log: who changed what, when and from
// where. Entries are append-only and chained: each carries the SHA-256 of
// the one before it in its chain, so an entry changed or removed afterwards
// shows when the chains are checked (Verifier, `api audit verify`). See
// docs/audit.md.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sort"
	"time"
)

// Retention is how long entries are kept: a month's entries are dropped
// once the newest of them is this old.
const Retention = 365 * 24 * time.Hour

// Chains is how many chains each merchant's log is spread over. An entry is
// appended to one of them while its chain's head is locked until the
// action's transaction commits, so the chains let that many of a merchant's
// audited writes (charges above all) commit at once; see docs/audit.md for
// the measured cost.
const Chains = 8

// Actor types.
const (
	ActorMember = "member"
	ActorAPIKey = "api_key"
)

// HashSize is the size of an entry's hash and of its link to the previous one.
const HashSize = sha256.Size

// Genesis is the previous hash of each chain's first entry.
var Genesis = make([]byte, HashSize)

// Entry is one audited action.
type Entry struct {
	ID         string
	MerchantID string
	Chain      int
	Seq        int64
	At         time.Time
	ActorType  string
	ActorID    string
	Action     string
	ObjectType string
	ObjectID   string
	IP         string
	UserAgent  string
	RequestID  string
	PrevHash   []byte
	Hash       []byte
}

// Encode is the canonical encoding of the entry's content that its hash
// covers: a version tag, then every field as a 4-byte big-endian length and
// its bytes (text as UTF-8; the chain, seq and time as 8-byte big-endian
// integers, the time in microseconds since the Unix epoch, the database's
// precision). The database's audit_append computes the same bytes
// (migrations/00013_audit_log.sql).
func (e Entry) Encode() []byte {
	var b bytes.Buffer
	str := func(s string) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		b.Write(n[:])
		b.WriteString(s)
	}
	num := func(v int64) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], 8)
		b.Write(n[:])
		var x [8]byte
		binary.BigEndian.PutUint64(x[:], uint64(v))
		b.Write(x[:])
	}
	str("gatehouse.audit.v1")
	str(e.ID)
	str(e.MerchantID)
	num(int64(e.Chain))
	num(e.Seq)
	num(e.At.UnixMicro())
	str(e.ActorType)
	str(e.ActorID)
	str(e.Action)
	str(e.ObjectType)
	str(e.ObjectID)
	str(e.IP)
	str(e.UserAgent)
	str(e.RequestID)
	return b.Bytes()
}

// ComputeHash is SHA-256 over the previous hash and the entry's encoding.
func (e Entry) ComputeHash() []byte {
	h := sha256.New()
	h.Write(e.PrevHash)
	h.Write(e.Encode())
	return h.Sum(nil)
}

// Seal sets the entry's link to prev and its hash.
func (e *Entry) Seal(prev []byte) {
	e.PrevHash = append([]byte(nil), prev...)
	e.Hash = e.ComputeHash()
}

// Link is a point of a chain: the seq and hash of an entry. A chain's
// anchor is the last entry of it that retention dropped; its head is the
// last one appended.
type Link struct {
	MerchantID string
	Chain      int
	Seq        int64
	Hash       []byte
}

// Break is the first broken link of a chain: the merchant, the chain, the
// seq of the entry at fault and what is wrong.
type Break struct {
	MerchantID string
	Chain      int
	Seq        int64
	Reason     string
}

func (b *Break) Error() string {
	return fmt.Sprintf("merchant %s chain %d seq %d: %s", b.MerchantID, b.Chain, b.Seq, b.Reason)
}

// Summary is what a check of every chain found.
type Summary struct {
	Merchants int
	Chains    int
	Entries   int64
	// Broken are the first broken link of each broken chain, in the order
	// they were found.
	Broken []Break
	// Missing are the months whose partition was made and is gone without
	// its drop being recorded, oldest first.
	Missing []Month
}

// Intact reports whether the check found nothing wrong.
func (s Summary) Intact() bool { return len(s.Broken) == 0 && len(s.Missing) == 0 }

// Month is one month of the log: the first instant of the UTC month and
// its partition's name.
type Month struct {
	Month     time.Time
	Partition string
}

func (m Month) Error() string {
	return fmt.Sprintf("month %s (partition %s): the partition is gone and its drop was not recorded (dropped outside retention)",
		m.Month.UTC().Format("2006-01"), m.Partition)
}

// MissingMonths returns the months of made (every partition ever made)
// whose partition is neither present nor recorded as dropped by retention,
// oldest first: a month removed behind retention's back.
func MissingMonths(made []Month, present, dropped map[string]bool) []Month {
	var out []Month
	for _, m := range made {
		if !present[m.Partition] && !dropped[m.Partition] {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Month.Before(out[j].Month) })
	return out
}

// Verifier checks chains fed to it entry by entry, ordered by merchant,
// chain and seq. Anchors and heads (by merchant and chain) say where each
// chain starts after retention and where it ends: an entry removed from the
// start, the middle or the end of a chain shows as a missing seq.
type Verifier struct {
	anchors map[chainKey]Link
	heads   map[chainKey]Link
	seen    map[chainKey]bool
	merch   map[string]bool

	cur    chainKey
	open   bool
	broken bool
	next   int64 // the seq expected next
	prev   []byte
	// anchored: prev is the chain's anchor, the hash recorded when
	// retention dropped the month of its last entry.
	anchored bool
	sum      Summary
}

type chainKey struct {
	merchant string
	chain    int
}

// NewVerifier starts a check with the chains' anchors (the latest of each
// chain) and heads.
func NewVerifier(anchors, heads []Link) *Verifier {
	v := &Verifier{anchors: map[chainKey]Link{}, heads: map[chainKey]Link{}, seen: map[chainKey]bool{}, merch: map[string]bool{}}
	for _, a := range anchors {
		k := chainKey{a.MerchantID, a.Chain}
		if cur, ok := v.anchors[k]; !ok || a.Seq > cur.Seq {
			v.anchors[k] = a
		}
	}
	for _, h := range heads {
		v.heads[chainKey{h.MerchantID, h.Chain}] = h
	}
	return v
}

func (v *Verifier) start(k chainKey) {
	v.cur, v.open, v.broken = k, true, false
	v.seen[k] = true
	v.merch[k.merchant] = true
	v.sum.Chains++
	v.next, v.prev, v.anchored = 1, Genesis, false
	if a, ok := v.anchors[k]; ok {
		v.next, v.prev, v.anchored = a.Seq+1, a.Hash, true
	}
}

func (v *Verifier) fail(seq int64, format string, args ...any) {
	v.broken = true
	v.sum.Broken = append(v.sum.Broken, Break{MerchantID: v.cur.merchant, Chain: v.cur.chain, Seq: seq, Reason: fmt.Sprintf(format, args...)})
}

// Add checks the next entry.
func (v *Verifier) Add(e Entry) {
	v.sum.Entries++
	k := chainKey{e.MerchantID, e.Chain}
	if !v.open || k != v.cur {
		v.end()
		v.start(k)
	}
	if v.broken {
		return
	}
	if a, ok := v.anchors[k]; ok && e.Seq <= a.Seq {
		return // kept past its month's drop (written late into an older month): the anchor vouches for it
	}
	switch {
	case e.Seq < v.next:
		v.fail(e.Seq, "seq %d appears again", e.Seq)
	case e.Seq > v.next:
		v.fail(v.next, "entry missing (the next entry found is seq %d)", e.Seq)
	case !bytes.Equal(e.PrevHash, v.prev) && v.anchored:
		v.fail(e.Seq, "its previous hash does not match the last hash recorded for seq %d when retention dropped its month (the chain was cut or rewritten there)", e.Seq-1)
	case !bytes.Equal(e.PrevHash, v.prev):
		v.fail(e.Seq, "its previous hash does not match the hash of seq %d (that entry was changed or replaced)", e.Seq-1)
	case !bytes.Equal(e.ComputeHash(), e.Hash):
		v.fail(e.Seq, "its hash does not match its content (the entry was changed)")
	default:
		v.next, v.prev, v.anchored = e.Seq+1, e.Hash, false
	}
}

// end closes the current chain: its last entry must be its head.
func (v *Verifier) end() {
	if !v.open {
		return
	}
	v.open = false
	if v.broken {
		return
	}
	h, ok := v.heads[v.cur]
	switch {
	case !ok:
		v.fail(v.next-1, "the chain has no head")
	case h.Seq >= v.next:
		v.fail(v.next, "entry missing (the chain's head is seq %d)", h.Seq)
	case h.Seq < v.next-1:
		v.fail(h.Seq+1, "entry after the chain's head (seq %d): the head was moved back (reset) behind its last entry, seq %d", h.Seq, v.next-1)
	case !bytes.Equal(h.Hash, v.prev):
		v.fail(h.Seq, "the chain's head hash does not match its last entry")
	}
}

// Finish closes the check: heads of chains that had no entry at all must
// equal their anchor (every entry of the chain was dropped by retention).
func (v *Verifier) Finish() Summary {
	v.end()
	for k, h := range v.heads {
		if v.seen[k] {
			continue
		}
		v.merch[k.merchant] = true
		v.sum.Chains++
		a, anchored := v.anchors[k]
		if h.Seq == 0 || anchored && a.Seq == h.Seq && bytes.Equal(a.Hash, h.Hash) {
			continue
		}
		from := int64(1)
		if anchored {
			from = a.Seq + 1
		}
		v.sum.Broken = append(v.sum.Broken, Break{MerchantID: k.merchant, Chain: k.chain, Seq: from,
			Reason: fmt.Sprintf("entry missing (the chain's head is seq %d)", h.Seq)})
	}
	v.sum.Merchants = len(v.merch)
	return v.sum
}
