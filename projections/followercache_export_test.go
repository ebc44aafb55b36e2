package projections

import "context"

// WithDelivery gives ctx the place of a message in its partition, as the
// runner does, so tests can drive Apply through the follower cache.
func WithDelivery(ctx context.Context, topic string, partition int32, offset int64) context.Context {
	return withDelivery(ctx, delivery{topic: topic, partition: partition, offset: offset})
}

// FollowerLoads is how many follower lists the inbox projector read from
// PostgreSQL for its cache; FollowerRows how many rows it holds.
func (p *Inbox) FollowerLoads() int64 {
	if p.cache == nil {
		return 0
	}
	return p.cache.loads.Load()
}
func (p *Inbox) FollowerRows() int { return p.cache.rowsHeld() }
