package queries

import (
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
)

// inboxView is the inbox read model of one inbox version: its keys and
// its operations, built from one read of the active versions
// (readmodel.LiveVersions.Active), so a read never takes one version's
// keys with another version's bound. A `feed rebuild inbox` with another
// bound switches the view with the version.
//
// It also names the followers version of the same read, whose celebrity
// set (celebs) is the pull side merged with these inboxes, and the
// celebrity threshold that version was built at (pol.CelebrityThreshold,
// what the PostgreSQL fallback of a lost set counts with): the threshold
// decides whose posts an inbox holds, so a home read takes its inboxes
// and its pull set from one view, and `feed rebuild inbox
// --celebrity-threshold`, which switches both versions at once, switches
// the view once.
type inboxView struct {
	version   int
	followers int                     // the followers version
	rec       readmodel.VersionRecord // the fields the view was built from
	frec      readmodel.VersionRecord // the followers version's
	pol       readmodel.Policy
	celebs    readmodel.Celebrities // the followers version's celebrity set
	// backfilled is the inbox version's record of the downward crossings
	// it has backfilled (pulled until then).
	backfilled readmodel.Backfilled
	// feed is the version's home feed (its owner: the cold rebuild and
	// the activity mark), inbox its Redis operations for the page reads.
	feed  *homefeed.Manager
	inbox homefeed.Inboxes
}

func newInboxView(db homefeed.DB, rdb redis.UniversalClient, keys readmodel.Keys, followers int, frec readmodel.VersionRecord, pol readmodel.Policy) *inboxView {
	version := keys.Version(readmodel.ProjectionInbox)
	ckeys := readmodel.Keys{Prefix: keys.Prefix, Versions: readmodel.Versions{}.With(readmodel.ProjectionFollowers, followers)}
	v := &inboxView{version: version, followers: followers, frec: frec, pol: pol.WithDefaults(),
		celebs:     readmodel.NewCelebrities(ckeys),
		backfilled: readmodel.NewBackfilled(readmodel.Keys{Prefix: keys.Prefix, Versions: readmodel.Versions{}.With(readmodel.ProjectionInbox, version)}),
		feed:       homefeed.New(homefeed.Config{Keys: keys, Policy: pol}, db, rdb)}
	v.inbox = v.feed.Inboxes()
	return v
}

// inboxes returns the view of the active inbox and followers versions:
// the one built last while the versions and their recorded policies
// stay, a new one when a switch changed them.
func (f *Feed) inboxes() *inboxView {
	cur := f.view.Load()
	if f.live == nil {
		return cur
	}
	f.live.Version(readmodel.ProjectionInbox) // starts the periodic refresh when due
	act := f.live.Active()
	v := act.Versions.Version(readmodel.ProjectionInbox)
	fv := act.Versions.Version(readmodel.ProjectionFollowers)
	rec := act.Record(readmodel.ProjectionInbox)
	frec := act.Record(readmodel.ProjectionFollowers)
	if cur != nil && cur.version == v && cur.followers == fv && cur.rec.InboxMax == rec.InboxMax &&
		cur.rec.CelebrityThreshold == rec.CelebrityThreshold && cur.frec.CelebrityThreshold == frec.CelebrityThreshold &&
		cur.rec.CelebrityBand == rec.CelebrityBand && cur.frec.CelebrityBand == frec.CelebrityBand {
		return cur
	}
	keys := readmodel.Keys{Prefix: f.cfg.Keys.Prefix, Versions: readmodel.Versions{}.With(readmodel.ProjectionInbox, v)}
	pol := rec.Apply(f.cfg.Policy())
	if frec.CelebrityThreshold > 0 {
		// The pull set's threshold is its own version's (equal to the
		// inbox version's: they switch together).
		pol.CelebrityThreshold = frec.CelebrityThreshold
	}
	if frec.BandRecorded {
		pol.CelebrityBand = frec.CelebrityBand
	}
	next := newInboxView(f.db, f.rdb, keys, fv, frec, pol)
	next.rec = rec
	if f.view.CompareAndSwap(cur, next) && cur != nil {
		if cur.pol.CelebrityThreshold != next.pol.CelebrityThreshold || cur.pol.CelebrityBand != next.pol.CelebrityBand {
			f.log.Info("queries: the followers and inbox versions switched celebrity threshold or band; adopting it",
				"inbox", v, "followers", fv, "from", cur.pol.CelebrityThreshold, "to", next.pol.CelebrityThreshold,
				"band_from", cur.pol.CelebrityBand, "band_to", next.pol.CelebrityBand)
		}
	}
	return f.view.Load()
}
