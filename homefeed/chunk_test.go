package homefeed

// builtChunk is an InboxChunk over inboxes computed beforehand.
type builtChunk struct {
	users   []int64
	expires []int64
	inboxes []BuiltInbox
}

func (c builtChunk) Len() int { return len(c.users) }

func (c builtChunk) Inbox(i int, b *BuiltInbox) (int64, int64, bool) {
	in := c.inboxes[i]
	if len(in.Kept) == 0 && !in.HasFloor {
		return 0, 0, false
	}
	b.Kept = append(b.Kept[:0], in.Kept...)
	b.Floor, b.HasFloor = in.Floor, in.HasFloor
	return c.users[i], c.expires[i], true
}
