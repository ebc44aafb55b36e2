package queries

import (
	"github.com/feedco/feed/readmodel"
)

// inboxView is the inbox read model of one inbox version: its keys and
// its layout's operations, built from one read of the active versions
// (readmodel.LiveVersions.Active), so a read never takes one version's
// keys in another version's layout. A `feed rebuild inbox` into another
// layout or bound switches the view with the version.
type inboxView struct {
	version int
	rec     readmodel.VersionRecord // the fields the view was built from
	pol     readmodel.Policy
	// store is the inboxes of the version's layout; zset (the sorted
	// set) and packed (nil unless that layout) their page reads.
	store  readmodel.InboxStore
	zset   readmodel.Inboxes
	packed *readmodel.PackedInboxes
}

func newInboxView(keys readmodel.Keys, version int, rec readmodel.VersionRecord, pol readmodel.Policy) *inboxView {
	v := &inboxView{version: version, rec: rec, pol: pol.WithDefaults(),
		zset: readmodel.NewInboxes(keys, pol), store: readmodel.NewInboxStore(keys, pol)}
	if pk, ok := v.store.(readmodel.PackedInboxes); ok {
		v.packed = &pk
	}
	return v
}

// inboxes returns the view of the active inbox version: the one built
// last while the version and its recorded policy stay, a new one when a
// switch changed them.
func (f *Feed) inboxes() *inboxView {
	cur := f.view.Load()
	if f.live == nil {
		return cur
	}
	f.live.Version(readmodel.ProjectionInbox) // starts the periodic refresh when due
	act := f.live.Active()
	v := act.Versions.Version(readmodel.ProjectionInbox)
	rec := act.Record(readmodel.ProjectionInbox)
	if cur != nil && cur.version == v && cur.rec.InboxLayout == rec.InboxLayout && cur.rec.InboxMax == rec.InboxMax {
		return cur
	}
	keys := readmodel.Keys{Prefix: f.cfg.Keys.Prefix, Versions: readmodel.Versions{}.With(readmodel.ProjectionInbox, v)}
	next := newInboxView(keys, v, rec, rec.Apply(f.cfg.Policy()))
	if f.view.CompareAndSwap(cur, next) && cur != nil && cur.pol.InboxLayout != next.pol.InboxLayout {
		f.log.Info("queries: the inbox version switched layout", "version", v, "from", cur.pol.InboxLayout, "to", next.pol.InboxLayout)
	}
	return f.view.Load()
}
