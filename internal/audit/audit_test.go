package audit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/audit"
)

// chain makes n sealed entries of one merchant's chain 0 from seq from,
// linked to prev.
func chain(merchant string, from int64, n int, prev []byte) []audit.Entry {
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	var out []audit.Entry
	for i := 0; i < n; i++ {
		e := audit.Entry{ID: "al_" + string(rune('a'+i)), MerchantID: merchant, Seq: from + int64(i), At: at.Add(time.Duration(i) * time.Second),
			ActorType: audit.ActorAPIKey, ActorID: "key_1", Action: "charge.create", ObjectType: "charge", ObjectID: "ch_1",
			IP: "192.0.2.1", UserAgent: "curl/8", RequestID: "req"}
		e.Seal(prev)
		prev = e.Hash
		out = append(out, e)
	}
	return out
}

func head(es []audit.Entry) audit.Link {
	last := es[len(es)-1]
	return audit.Link{MerchantID: last.MerchantID, Chain: last.Chain, Seq: last.Seq, Hash: last.Hash}
}

func verify(anchors []audit.Link, heads []audit.Link, es []audit.Entry) audit.Summary {
	v := audit.NewVerifier(anchors, heads)
	for _, e := range es {
		v.Add(e)
	}
	return v.Finish()
}

func TestEncodingIsLengthPrefixedAndHashedOverThePrevious(t *testing.T) {
	e := audit.Entry{ID: "al_1", MerchantID: "mer_1", Chain: 2, Seq: 3, At: time.UnixMicro(1_700_000_000_123_456),
		ActorType: "member", ActorID: "mem_1", Action: "api_key.revoke", ObjectType: "api_key", ObjectID: "key_1",
		IP: "2001:db8::1", UserAgent: "Mozilla/5.0 é", RequestID: "r-1"}
	enc := e.Encode()
	// The version tag first: its length, then its bytes.
	if hex.EncodeToString(enc[:4]) != "00000012" || string(enc[4:22]) != "gatehouse.audit.v1" {
		t.Fatalf("encoding starts %x", enc[:22])
	}
	// Moving a character from one field to the next changes the encoding.
	moved := e
	moved.ActorType, moved.ActorID = "membe", "rmem_1"
	if string(moved.Encode()) == string(enc) {
		t.Fatal("fields are not delimited")
	}
	e.Seal(audit.Genesis)
	want := sha256.Sum256(append(append([]byte{}, audit.Genesis...), enc...))
	if hex.EncodeToString(e.Hash) != hex.EncodeToString(want[:]) {
		t.Fatalf("hash %x, want %x", e.Hash, want)
	}
	// Every field is covered.
	for name, change := range map[string]func(*audit.Entry){
		"id": func(e *audit.Entry) { e.ID += "x" }, "merchant": func(e *audit.Entry) { e.MerchantID += "x" },
		"chain": func(e *audit.Entry) { e.Chain++ }, "seq": func(e *audit.Entry) { e.Seq++ },
		"at": func(e *audit.Entry) { e.At = e.At.Add(time.Microsecond) }, "actor": func(e *audit.Entry) { e.ActorID += "x" },
		"action": func(e *audit.Entry) { e.Action += "x" }, "object": func(e *audit.Entry) { e.ObjectID += "x" },
		"object type": func(e *audit.Entry) { e.ObjectType += "x" }, "ip": func(e *audit.Entry) { e.IP += "x" },
		"user agent": func(e *audit.Entry) { e.UserAgent += "x" }, "request": func(e *audit.Entry) { e.RequestID += "x" },
		"actor type": func(e *audit.Entry) { e.ActorType += "x" }, "previous": func(e *audit.Entry) { e.PrevHash = e.Hash },
	} {
		c := e
		change(&c)
		if hex.EncodeToString(c.ComputeHash()) == hex.EncodeToString(e.Hash) {
			t.Errorf("changing the %s keeps the hash", name)
		}
	}
}

func TestVerifyIntactChains(t *testing.T) {
	a := chain("mer_a", 1, 5, audit.Genesis)
	b := chain("mer_b", 1, 2, audit.Genesis)
	sum := verify(nil, []audit.Link{head(a), head(b)}, append(a, b...))
	if len(sum.Broken) != 0 || sum.Entries != 7 || sum.Chains != 2 || sum.Merchants != 2 {
		t.Fatalf("intact: %+v", sum)
	}
}

func TestVerifyFindsTheFirstBrokenLink(t *testing.T) {
	for _, c := range []struct {
		name    string
		tamper  func([]audit.Entry) []audit.Entry
		seq     int64
		because string
	}{
		{"a changed field", func(es []audit.Entry) []audit.Entry { es[2].IP = "203.0.113.9"; return es }, 3, "does not match its content"},
		{"a changed field with its hash recomputed", func(es []audit.Entry) []audit.Entry {
			es[2].Action = "charge.void"
			es[2].Hash = es[2].ComputeHash()
			return es
		}, 4, "previous hash"},
		{"a deleted middle entry", func(es []audit.Entry) []audit.Entry { return append(es[:2], es[3:]...) }, 3, "missing"},
		{"a deleted first entry", func(es []audit.Entry) []audit.Entry { return es[1:] }, 1, "missing"},
		{"a deleted last entry", func(es []audit.Entry) []audit.Entry { return es[:4] }, 5, "missing"},
		{"a duplicated entry", func(es []audit.Entry) []audit.Entry { return append(es[:3], es[2:]...) }, 3, "again"},
	} {
		t.Run(c.name, func(t *testing.T) {
			es := chain("mer_a", 1, 5, audit.Genesis)
			h := head(es)
			sum := verify(nil, []audit.Link{h}, c.tamper(es))
			if len(sum.Broken) != 1 {
				t.Fatalf("broken %+v, want one", sum.Broken)
			}
			b := sum.Broken[0]
			if b.MerchantID != "mer_a" || b.Seq != c.seq || !strings.Contains(b.Reason, c.because) {
				t.Fatalf("broken %+v, want seq %d (%s)", b, c.seq, c.because)
			}
		})
	}
}

func TestVerifyStartsAfterTheAnchor(t *testing.T) {
	all := chain("mer_a", 1, 6, audit.Genesis)
	anchor := audit.Link{MerchantID: "mer_a", Seq: 3, Hash: all[2].Hash}
	kept := all[3:]
	if sum := verify([]audit.Link{anchor}, []audit.Link{head(all)}, kept); len(sum.Broken) != 0 {
		t.Fatalf("anchored chain: %+v", sum.Broken)
	}
	// An older anchor is superseded by the latest.
	older := audit.Link{MerchantID: "mer_a", Seq: 1, Hash: all[0].Hash}
	if sum := verify([]audit.Link{older, anchor}, []audit.Link{head(all)}, kept); len(sum.Broken) != 0 {
		t.Fatalf("two anchors: %+v", sum.Broken)
	}
	// Without the anchor the dropped entries are missing.
	if sum := verify(nil, []audit.Link{head(all)}, kept); len(sum.Broken) != 1 || sum.Broken[0].Seq != 1 {
		t.Fatalf("unanchored: %+v", sum.Broken)
	}
	// A forged anchor does not link to the kept entries.
	forged := anchor
	forged.Hash = all[1].Hash
	if sum := verify([]audit.Link{forged}, []audit.Link{head(all)}, kept); len(sum.Broken) != 1 || sum.Broken[0].Seq != 4 {
		t.Fatalf("forged anchor: %+v", sum.Broken)
	}
	// Every entry dropped: the head must be the anchor.
	last := audit.Link{MerchantID: "mer_a", Seq: 6, Hash: all[5].Hash}
	if sum := verify([]audit.Link{last}, []audit.Link{head(all)}, nil); len(sum.Broken) != 0 {
		t.Fatalf("all dropped: %+v", sum.Broken)
	}
	if sum := verify([]audit.Link{anchor}, []audit.Link{head(all)}, nil); len(sum.Broken) != 1 || sum.Broken[0].Seq != 4 {
		t.Fatalf("entries after the anchor removed: %+v", sum.Broken)
	}
}

func TestRecordIsWrittenOnce(t *testing.T) {
	ctx := audit.WithRecord(context.Background(), audit.NewRecord(audit.Entry{Action: "charge.create"}))
	audit.SetObject(ctx, "charge", "ch_1")
	e, ok := audit.Claim(ctx)
	if !ok || e.ObjectID != "ch_1" {
		t.Fatalf("claim: %+v %v", e, ok)
	}
	if _, again := audit.Claim(ctx); again {
		t.Fatal("claimed twice")
	}
	audit.Release(ctx, false) // rolled back: pending again
	if !audit.Pending(ctx) {
		t.Fatal("a rolled back record is not pending")
	}
	audit.Claim(ctx)
	audit.Release(ctx, true)
	if audit.Pending(ctx) || !audit.FromContext(ctx).Written() {
		t.Fatal("a committed record is still pending")
	}

	replay := audit.WithRecord(context.Background(), audit.NewRecord(audit.Entry{}))
	audit.Skip(replay)
	if _, ok := audit.Claim(replay); ok || audit.FromContext(replay).Written() {
		t.Fatal("a skipped record is written")
	}
	if _, ok := audit.Claim(context.Background()); ok {
		t.Fatal("a context without a record claims one")
	}
}

// A month made and neither there nor recorded as dropped is missing; one
// recorded by retention, or still there, is not.
func TestMissingMonths(t *testing.T) {
	month := func(m time.Month) audit.Month {
		at := time.Date(2026, m, 1, 0, 0, 0, 0, time.UTC)
		return audit.Month{Month: at, Partition: "audit_log_" + at.Format("2006_01")}
	}
	made := []audit.Month{month(3), month(1), month(2), month(4)}
	present := map[string]bool{month(4).Partition: true, month(2).Partition: true}
	dropped := map[string]bool{month(1).Partition: true}
	got := audit.MissingMonths(made, present, dropped)
	if len(got) != 1 || got[0] != month(3) || !strings.Contains(got[0].Error(), "month 2026-03 (partition audit_log_2026_03)") {
		t.Fatalf("missing %+v, want March 2026 alone", got)
	}
	if sum := (audit.Summary{Missing: got}); sum.Intact() {
		t.Error("a summary with a missing month is intact")
	}
}

// A head moved back behind the chain's last entry is named as such.
func TestVerifierFindsHeadMovedBack(t *testing.T) {
	entries := chain("mer_a", 1, 3, audit.Genesis)
	v := audit.NewVerifier(nil, []audit.Link{{MerchantID: "mer_a", Chain: 0, Seq: 1, Hash: entries[0].Hash}})
	for _, e := range entries {
		v.Add(e)
	}
	sum := v.Finish()
	if len(sum.Broken) != 1 || sum.Broken[0].Seq != 2 || !strings.Contains(sum.Broken[0].Reason, "moved back") {
		t.Fatalf("broken %+v, want seq 2 named, the head moved back", sum.Broken)
	}
}
