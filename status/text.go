package status

import (
	"fmt"
	"io"
	"time"
)

// WriteText writes the report as `feed status` prints it: the sections in
// order, blank lines between them, a failed one as "name: unavailable:
// error" after whatever of it was gathered.
func (r Report) WriteText(w io.Writer) {
	for i, s := range []func(io.Writer, time.Time) error{r.CDC.writeText, r.Projections.writeText, r.Poison.writeText, r.Verify.writeText, r.Redis.writeText} {
		if i > 0 {
			fmt.Fprintln(w)
		}
		_ = s(w, r.GeneratedAt)
	}
}

// WriteText writes the section alone and returns its error.
func (c CDC) WriteText(w io.Writer, now time.Time) error { return c.writeText(w, now) }

// WriteText writes the section alone and returns its error.
func (p Projections) WriteText(w io.Writer, now time.Time) error { return p.writeText(w, now) }

// WriteText writes the section alone and returns its error.
func (p Poison) WriteText(w io.Writer, now time.Time) error { return p.writeText(w, now) }

// WriteText writes the section alone and returns its error.
func (v Verify) WriteText(w io.Writer, now time.Time) error { return v.writeText(w, now) }

// WriteText writes the section alone and returns its error.
func (r Redis) WriteText(w io.Writer, now time.Time) error { return r.writeText(w, now) }

func unavailable(w io.Writer, name, err string) error {
	fmt.Fprintf(w, "%s: unavailable: %s\n", name, err)
	return sectionErr(err)
}

func (c CDC) writeText(w io.Writer, now time.Time) error {
	if c.Error != "" {
		return unavailable(w, "cdc", c.Error)
	}
	fmt.Fprintf(w, "cdc (slot %s, topic %s):\n", c.Slot, c.Topic)
	if c.SlotLoss != "" {
		fmt.Fprintf(w, "  slot loss        %s\n", c.SlotLoss)
	}
	if !c.Exists {
		fmt.Fprintln(w, "  slot             missing: `feed cdc` creates it (events committed before that are not streamed)")
		return nil
	}
	state := "active (a CDC process is streaming)"
	if !c.Active {
		state = "INACTIVE: no CDC process is streaming; PostgreSQL keeps WAL until one does"
	}
	fmt.Fprintf(w, "  state            %s\n", state)
	fmt.Fprintf(w, "  confirmed LSN    %s (server at %s)\n", c.ConfirmedLSN, c.CurrentLSN)
	warn := ""
	if c.LagOverWarn {
		warn = fmt.Sprintf("  <-- over FEED_LAG_WARN_BYTES (%d)", c.LagWarnBytes)
	}
	fmt.Fprintf(w, "  lag              %d bytes, %.1f s%s\n", c.LagBytes, c.LagSeconds, warn)
	if c.WALStatus != "" && c.WALStatus != "reserved" {
		fmt.Fprintf(w, "  wal status       %s (see docs/cdc.md)\n", c.WALStatus)
	}
	published := "none recorded yet"
	if c.ProgressSavedAt != nil {
		published = fmt.Sprintf("%d (progress saved %s ago)", c.EventsPublished, max(now.Sub(*c.ProgressSavedAt), 0).Round(time.Second))
	}
	fmt.Fprintf(w, "  events published %s\n", published)
	if c.NewestCommitAt != nil {
		fmt.Fprintf(w, "  newest published commit %s\n", c.NewestCommitAt.UTC().Format(time.RFC3339))
	}
	return nil
}

func (p Projections) writeText(w io.Writer, _ time.Time) error {
	if len(p.Versions) == 0 {
		return unavailable(w, "projections", p.Error)
	}
	fmt.Fprintln(w, "projections (active version, consumer group, lag in messages):")
	for _, v := range p.Versions {
		lag := "unknown"
		if v.Lag != nil {
			lag = fmt.Sprint(*v.Lag)
		}
		note := ""
		if v.Dirty && !p.Rebuild.Running {
			note = "  (an interrupted rebuild left keys of another version: the next `feed rebuild " + v.Name + "` deletes them)"
		}
		switch {
		case v.Name == "inbox" && v.Policy.InboxLayout != "":
			note += fmt.Sprintf("  (layout %s, inbox max %d, celebrity threshold %d, band %d)", v.Policy.InboxLayout, v.Policy.InboxMax,
				v.Policy.CelebrityThreshold, v.Policy.CelebrityBand)
		case v.Name == "followers" && v.Policy.CelebrityThreshold > 0:
			note += fmt.Sprintf("  (celebrity threshold %d, band %d)", v.Policy.CelebrityThreshold, v.Policy.CelebrityBand)
		}
		if v.RegistryVersion != v.Version {
			note += fmt.Sprintf("  (the Redis registry says v%d, 0 = missing: the projectors and the query side restore it from PostgreSQL)", v.RegistryVersion)
		}
		fmt.Fprintf(w, "  %-10s v%-3d %-34s %s%s\n", v.Name, v.Version, v.Group, lag, note)
	}
	if b := p.Rebuild; b.Running {
		started := ""
		if b.Started != nil {
			started = b.Started.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "  rebuild running: %s to v%d, phase %s (started %s)\n", b.Projection, b.Version, b.Phase, started)
		if b.Stage != "" {
			fmt.Fprintf(w, "    %s\n", b.Progress())
		}
		if b.CatchUpLag != nil {
			fmt.Fprintf(w, "    catch-up: %d messages behind\n", *b.CatchUpLag)
		}
	} else {
		fmt.Fprintln(w, "  rebuild running: no")
	}
	if p.Error != "" {
		return unavailable(w, "projections", p.Error)
	}
	return nil
}

// Progress is the build stage's counts, e.g. "inbox v2 build: write
// inboxes 1200/5000 active users (24%)".
func (b Rebuild) Progress() string {
	if b.Total > 0 {
		return fmt.Sprintf("%s %d/%d %s (%.0f%%)", b.Stage, b.Done, b.Total, b.Unit, 100*min(float64(b.Done)/float64(b.Total), 1))
	}
	return fmt.Sprintf("%s %d %s", b.Stage, b.Done, b.Unit)
}

func (p Poison) writeText(w io.Writer, _ time.Time) error {
	if p.Error != "" {
		return unavailable(w, "poison", p.Error)
	}
	fmt.Fprintf(w, "poison queue (%s; pending, replayed, discarded):\n", p.Topic)
	if len(p.Groups) == 0 {
		fmt.Fprintln(w, "  empty")
		return nil
	}
	for _, g := range p.Groups {
		note := ""
		if g.Pending > 0 {
			note = "  <-- `feed poison list --group " + g.Group + "`"
		}
		fmt.Fprintf(w, "  %-34s %d pending, %d replayed, %d discarded%s\n", g.Group, g.Pending, g.Replayed, g.Discarded, note)
	}
	return nil
}

func (v Verify) writeText(w io.Writer, now time.Time) error {
	if v.Error != "" {
		return unavailable(w, "verify", v.Error)
	}
	fmt.Fprintln(w, "verify (the last live verification per source):")
	if len(v.Results) == 0 {
		fmt.Fprintln(w, "  none recorded yet (`feed verify`, or FEED_VERIFY_EVERY in `feed project` and `feed dev`)")
		return nil
	}
	for _, r := range v.Results {
		res := r.Result
		if res != "ok" {
			res = "DIFFERENCES"
			if r.Result == "error" {
				res = "ERROR"
			}
		}
		fmt.Fprintf(w, "  %-9s %s at %s (%s ago), took %.1f s", r.Source, res, r.FinishedAt.Format(time.RFC3339),
			max(now.Sub(r.FinishedAt), 0).Round(time.Second), r.TookSeconds)
		if r.Result != "error" {
			fmt.Fprintf(w, ": %d users (%d cold), %d posts, %d differences", r.Users, r.Cold, r.Posts, r.Differences)
		}
		fmt.Fprintln(w)
		if r.Detail != "" {
			fmt.Fprintf(w, "            %s\n", r.Detail)
		}
	}
	return nil
}

func (r Redis) writeText(w io.Writer, _ time.Time) error {
	if len(r.Nodes) == 0 {
		return unavailable(w, "redis", r.Error)
	}
	mode := "single node"
	if r.Mode == "cluster" {
		mode = fmt.Sprintf("cluster, %d masters", len(r.Nodes))
	}
	var keys, mem, cmds int64
	for _, n := range r.Nodes {
		keys, mem, cmds = keys+n.Keys, mem+n.MemoryBytes, cmds+n.Commands
	}
	fmt.Fprintf(w, "redis (%s; keys, memory, commands processed per node):\n", mode)
	for _, n := range r.Nodes {
		fmt.Fprintf(w, "  %-21s keys %d (%s)  memory %d MB (%s)  commands %d (%s)\n", n.Addr,
			n.Keys, share(n.Keys, keys), n.MemoryBytes>>20, share(n.MemoryBytes, mem), n.Commands, share(n.Commands, cmds))
	}
	if r.Error != "" {
		return unavailable(w, "redis", r.Error)
	}
	return nil
}

// share is v's percentage of total ("-" when total is 0).
func share(v, total int64) string {
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(v)/float64(total))
}
