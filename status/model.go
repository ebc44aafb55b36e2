// Package status gathers the state of a running deployment once, as one
// model (Report), for the three places that show it: `feed status` (text,
// WriteText), `feed status --output json` (the Report as JSON, its field
// names documented in docs/api.md, "Status") and the API's /status page
// (WriteHTML). Each section is gathered on its own: one that fails carries
// its error and does not hide the others.
package status

import (
	"errors"
	"time"
)

// Report is the whole status.
type Report struct {
	// GeneratedAt is when the gathering started.
	GeneratedAt time.Time   `json:"generatedAt"`
	CDC         CDC         `json:"cdc"`
	Projections Projections `json:"projections"`
	Poison      Poison      `json:"poison"`
	Verify      Verify      `json:"verify"`
	Redis       Redis       `json:"redis"`
}

// Failed names the sections that could not be gathered (whole or in part).
func (r Report) Failed() []string {
	var out []string
	for _, s := range []struct {
		name string
		err  string
	}{{"cdc", r.CDC.Error}, {"projections", r.Projections.Error}, {"poison", r.Poison.Error}, {"verify", r.Verify.Error}, {"redis", r.Redis.Error}} {
		if s.err != "" {
			out = append(out, s.name)
		}
	}
	return out
}

// CDC is the replication slot and CDC's progress (cdc.Status).
type CDC struct {
	// Error is why the section could not be gathered ("" when it was).
	Error string `json:"error,omitempty"`
	Slot  string `json:"slot"`
	Topic string `json:"topic"`
	// Exists: the slot exists; Active: a CDC process streams from it.
	Exists bool `json:"exists"`
	Active bool `json:"active"`
	// ConfirmedLSN is what CDC confirmed, CurrentLSN the server's WAL
	// position; LagBytes their difference, LagSeconds the age of the
	// oldest event not yet published (0: none).
	ConfirmedLSN string  `json:"confirmedLsn"`
	CurrentLSN   string  `json:"currentLsn"`
	LagBytes     int64   `json:"lagBytes"`
	LagSeconds   float64 `json:"lagSeconds"`
	// LagWarnBytes is FEED_LAG_WARN_BYTES; LagOverWarn says LagBytes is
	// above it.
	LagWarnBytes int64 `json:"lagWarnBytes"`
	LagOverWarn  bool  `json:"lagOverWarn"`
	// WALStatus is pg_replication_slots.wal_status ("": no slot).
	WALStatus string `json:"walStatus"`
	// EventsPublished counts the events Kafka acknowledged, as of
	// ProgressSavedAt (nil: CDC recorded no progress yet).
	EventsPublished int64      `json:"eventsPublished"`
	ProgressSavedAt *time.Time `json:"progressSavedAt"`
	// NewestCommitAt is the commit time of the newest published
	// transaction (nil: none).
	NewestCommitAt *time.Time `json:"newestCommitAt"`
	// SlotLoss says what is known of a lost slot ("": nothing);
	// SlotLosses counts the losses CDC healed, HealPending is true while
	// a heal republishes.
	SlotLoss    string `json:"slotLoss,omitempty"`
	SlotLosses  int64  `json:"slotLosses"`
	HealPending bool   `json:"healPending"`
}

// Projections are the active versions, their consumer groups and the
// running rebuild.
type Projections struct {
	Error    string       `json:"error,omitempty"`
	Versions []Projection `json:"versions"`
	Rebuild  Rebuild      `json:"rebuild"`
}

// Projection is one projection's active version.
type Projection struct {
	Name string `json:"name"`
	// Version is the active version (PostgreSQL); RegistryVersion the one
	// the Redis registry holds (0: missing; readers restore it).
	Version         int `json:"version"`
	RegistryVersion int `json:"registryVersion"`
	// Group is the active version's consumer group, Lag the messages of
	// the topic it has not committed (nil: Kafka could not be asked).
	Group string `json:"group"`
	Lag   *int64 `json:"lag"`
	// Policy is what the version was built with (zeros and "": not
	// recorded).
	Policy Policy `json:"policy"`
	// Dirty: keys of another version may exist (a rebuild runs, or one was
	// interrupted and the next one deletes them).
	Dirty bool `json:"dirty"`
}

// Policy is the fan-out policy recorded with a version.
type Policy struct {
	CelebrityThreshold int64  `json:"celebrityThreshold"`
	CelebrityBand      int64  `json:"celebrityBand"`
	InboxMax           int    `json:"inboxMax"`
	InboxLayout        string `json:"inboxLayout"`
}

// Rebuild is what the running `feed rebuild` says about itself.
type Rebuild struct {
	Running bool `json:"running"`
	// Projection is being rebuilt to Version, now in Phase (prepare,
	// build, catch-up, verify, handover, cleanup).
	Projection string     `json:"projection,omitempty"`
	Version    int        `json:"version,omitempty"`
	Phase      string     `json:"phase,omitempty"`
	Started    *time.Time `json:"started,omitempty"`
	Updated    *time.Time `json:"updated,omitempty"`
	// Stage is the build's current stage, with Done of Total Unit (Total 0:
	// not known), recorded every second ("" outside the build).
	Stage string `json:"stage,omitempty"`
	Unit  string `json:"unit,omitempty"`
	Done  int64  `json:"done"`
	Total int64  `json:"total"`
	// CatchUpLag is the new group's lag during the catch-up (nil: not in
	// it).
	CatchUpLag *int64 `json:"catchUpLag"`
}

// Poison is the poison queue by consumer group.
type Poison struct {
	Error  string        `json:"error,omitempty"`
	Topic  string        `json:"topic"`
	Groups []PoisonGroup `json:"groups"`
}

// PoisonGroup is one group's poisoned records by state.
type PoisonGroup struct {
	Group     string `json:"group"`
	Pending   int    `json:"pending"`
	Replayed  int    `json:"replayed"`
	Discarded int    `json:"discarded"`
}

// Verify is the last result of the live verification, per source.
type Verify struct {
	Error   string         `json:"error,omitempty"`
	Results []VerifyResult `json:"results"`
}

// VerifyResult is one source's last run (verify.Result).
type VerifyResult struct {
	// Source is periodic (FEED_VERIFY_EVERY) or command (`feed verify`).
	Source string `json:"source"`
	// Result is ok, differences or error.
	Result      string    `json:"result"`
	FinishedAt  time.Time `json:"finishedAt"`
	TookSeconds float64   `json:"tookSeconds"`
	Users       int       `json:"users"`
	Cold        int       `json:"cold"`
	Posts       int       `json:"posts"`
	Differences int       `json:"differences"`
	// Detail is the first difference or the error.
	Detail string `json:"detail,omitempty"`
}

// Redis is the read models' server, or every master of a cluster.
type Redis struct {
	Error string `json:"error,omitempty"`
	// Mode is single or cluster.
	Mode  string      `json:"mode"`
	Nodes []RedisNode `json:"nodes"`
}

// RedisNode is one node's keys (DBSIZE), memory (INFO used_memory) and
// commands processed since it started (INFO total_commands_processed).
type RedisNode struct {
	Addr        string `json:"addr"`
	Keys        int64  `json:"keys"`
	MemoryBytes int64  `json:"memoryBytes"`
	Commands    int64  `json:"commands"`
}

// sectionErr is a section's Error as an error (nil when "").
func sectionErr(s string) error {
	if s == "" {
		return nil
	}
	return errors.New(s)
}
