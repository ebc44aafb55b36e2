package projections

import "context"

// BuildInboxesWithZADD is BuildInboxes writing every inbox with ZADD +
// PEXPIRE (the fallback for servers that refuse the RESTORE payload).
func (p *Inbox) BuildInboxesWithZADD(ctx context.Context, db Beginner, progress BuildProgress) (int64, error) {
	return p.buildInboxes(ctx, db, progress, false)
}
