package projections

import "context"

// BuildInboxesWithZADD is BuildInboxes writing every inbox with ZADD +
// PEXPIRE (the fallback for servers that refuse the RESTORE payload).
func (p *Inbox) BuildInboxesWithZADD(ctx context.Context, db Beginner, progress BuildProgress) (int64, error) {
	return p.buildInboxes(ctx, db, progress, false)
}

// SetFollowerChunk sets the followers build's fields per command (and
// commands per pipeline) and returns the previous value.
func SetFollowerChunk(n int) int {
	old := followerChunk
	followerChunk = n
	return old
}
