package homefeed

import (
	"strconv"
	"testing"

	"github.com/feedco/feed/readmodel"
)

// An inbox's two keys are `pfeed:{u}` and `pfeed:{u}+` in the inbox
// version's namespace, with one hash tag (the scripts name both: one
// slot); they and the sorted-set inboxes of earlier releases classify as
// the inbox projection's, of their version, so a rebuild's cleanup
// deletes them.
func TestKeysAndClassify(t *testing.T) {
	for _, v := range []int{1, 2, 12} {
		k := readmodel.Keys{Prefix: "t9:", Versions: readmodel.Versions{}.With(readmodel.ProjectionInbox, v)}
		ns := "t9:"
		if v > 1 {
			ns += "v" + strconv.Itoa(v) + ":"
		}
		sealed, buf := NewInboxes(k, readmodel.Policy{}).Keys(-8)
		if want := ns + "pfeed:{-8}"; sealed != want || buf != want+"+" || Key(k, -8) != want {
			t.Errorf("version %d: keys %q %q (Key %q), want %q and its +", v, sealed, buf, Key(k, -8), want)
		}
		if got := string(NewInboxes(k, readmodel.Policy{}).AppendBufferKey([]byte("x"), -8)); got != "x"+buf {
			t.Errorf("version %d: appended %q, want x%s", v, got, buf)
		}
		for _, key := range []string{sealed, buf, ns + "feed:{-8}"} {
			if p, got, ok := (readmodel.Keys{Prefix: "t9:"}).Classify(key); !ok || p != readmodel.ProjectionInbox || got != v {
				t.Errorf("Classify(%q) = %s, %d, %v; want inbox, %d", key, p, got, ok, v)
			}
		}
	}
}
