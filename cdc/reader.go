package cdc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/feedco/feed/internal/kafka"
)

// session is one replication connection: it makes sure the slot exists
// (creating it at a first start, healing or stopping after its loss),
// streams from the slot's confirmed position, hands events to the lanes and
// confirms progress, until an error or ctx ends. progressed reports whether
// any change arrived (the caller then resets its backoff).
func (c *CDC) session(ctx context.Context, cancelLanes context.CancelFunc) (progressed bool, err error) {
	// The slot exists, and streaming from it leaves no gap (heal.go).
	if err := c.prepareSlot(ctx); err != nil {
		return false, err
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())

	err = pglogrepl.StartReplication(ctx, conn, c.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + c.cfg.Publication + "'"},
	})
	if err != nil {
		return false, fmt.Errorf("start replication from slot %s: %w", c.cfg.Slot, err)
	}
	c.cfg.Logger.Info("cdc: streaming", "slot", c.cfg.Slot, "topic", c.cfg.Topic)
	if c.cfg.OnStreaming != nil {
		c.streaming.Do(c.cfg.OnStreaming)
	}

	r := &reader{c: c, conn: conn, relations: map[uint32]*eventColumns{}}
	// ReceiveMessage runs without a context (a context per message costs a
	// goroutine in pgconn); the read deadline wakes the loop instead, and
	// the end of ctx pulls the deadline in.
	stop := context.AfterFunc(ctx, func() { _ = conn.Conn().SetReadDeadline(time.Now()) })
	defer stop()
	err = r.loop(ctx)
	progressed = r.progressed
	if r.cur != nil {
		// The stream broke inside a transaction: the slot sends it again,
		// whole; what was already handed to the lanes is published twice.
		c.ckpt.abandon(r.cur)
		c.m.redelivered.Add(float64(r.cur.submitted))
		r.cur = nil
	}
	if ctx.Err() != nil {
		// Shutdown: publish what was read, then confirm it.
		c.flush(cancelLanes)
		_ = conn.Conn().SetReadDeadline(time.Time{})
		if err := r.sendStatus(true); err != nil {
			c.cfg.Logger.Warn("cdc: final confirm", "err", err)
		}
		return progressed, ctx.Err()
	}
	return progressed, err
}

// connect opens the replication connection. DateStyle and TimeZone fix the
// text format of recorded_at.
func (c *CDC) connect(ctx context.Context) (*pgconn.PgConn, error) {
	pc, err := pgconn.ParseConfig(c.cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	pc.RuntimeParams["replication"] = "database"
	pc.RuntimeParams["application_name"] = "feed-cdc"
	pc.RuntimeParams["DateStyle"] = "ISO"
	pc.RuntimeParams["TimeZone"] = "UTC"
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgconn.ConnectConfig(cctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open replication connection: %w", err)
	}
	return conn, nil
}

// reader decodes one session's stream. It runs on one goroutine, the only
// one that touches the connection.
type reader struct {
	c          *CDC
	conn       *pgconn.PgConn
	relations  map[uint32]*eventColumns // relation cache, per connection
	cur        *txn                     // the transaction being received
	skipping   bool                     // inside a transaction already received
	serverEnd  pglogrepl.LSN            // newest server WAL position seen
	lastStatus time.Time
	progressed bool
}

func (r *reader) loop(ctx context.Context) error {
	cfg := r.c.cfg
	nextTick := time.Now().Add(cfg.ConfirmInterval)
	if err := r.conn.Conn().SetReadDeadline(nextTick); err != nil {
		return fmt.Errorf("set read deadline: %w", err)
	}
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if now := time.Now(); !now.Before(nextTick) {
			if err := r.sendStatus(false); err != nil {
				return err
			}
			nextTick = now.Add(cfg.ConfirmInterval)
			if err := r.conn.Conn().SetReadDeadline(nextTick); err != nil {
				return fmt.Errorf("set read deadline: %w", err)
			}
		}
		raw, err := r.conn.ReceiveMessage(context.Background())
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("receive replication message: %w", err)
		}
		switch msg := raw.(type) {
		case *pgproto3.CopyData:
			if err := r.handleCopyData(ctx, msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone:
			return errors.New("replication stream: server ended the copy")
		}
	}
}

func (r *reader) handleCopyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parse keepalive: %w", err)
		}
		r.serverEnd = max(r.serverEnd, ka.ServerWALEnd)
		if ka.ReplyRequested {
			return r.sendStatus(true)
		}
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse XLogData: %w", err)
		}
		r.progressed = true
		r.serverEnd = max(r.serverEnd, x.ServerWALEnd)
		return r.handle(ctx, x.WALData)
	}
	return nil
}

// handle applies one pgoutput message.
func (r *reader) handle(ctx context.Context, data []byte) error {
	msg, err := r.c.decode(data)
	if err != nil {
		return err
	}
	switch m := msg.(type) {
	case *beginMsg:
		if r.cur != nil || r.skipping {
			return fmt.Errorf("begin of %s inside a transaction: %w", m.FinalLSN, ErrMalformed)
		}
		if m.FinalLSN <= r.c.lastReceived {
			r.skipping = true // resent after a reconnect; already on its way
			return nil
		}
		r.cur = r.c.ckpt.begin(m.FinalLSN, m.CommitTime)
		// Its events wait in their lanes until PostgreSQL shows it to new
		// snapshots (visibility.go).
		r.cur.xid = m.Xid
		r.c.visible.add(r.cur)
	case *commitMsg:
		if r.skipping {
			r.skipping = false
			return nil
		}
		if r.cur == nil {
			return fmt.Errorf("commit %s outside a transaction: %w", m.CommitLSN, ErrMalformed)
		}
		r.c.ckpt.commit(r.cur, m.EndLSN)
		r.c.lastReceived = r.cur.commitLSN
		r.cur = nil
	case *relation:
		cols, err := newEventColumns(m)
		if err != nil {
			return err
		}
		r.relations[m.ID] = &cols
	case *insertMsg:
		if r.skipping {
			return nil
		}
		if r.cur == nil {
			return fmt.Errorf("insert outside a transaction: %w", ErrMalformed)
		}
		cols, ok := r.relations[m.RelationID]
		if !ok {
			return fmt.Errorf("insert into relation %d before its relation message: %w", m.RelationID, ErrMalformed)
		}
		return r.submit(ctx, *cols, m.Values)
	}
	return nil
}

// submit queues one row on its key's lane, waiting (and keeping the
// session alive) while the lane is full.
func (r *reader) submit(ctx context.Context, cols eventColumns, vals [][]byte) error {
	row, err := rowOf(cols, vals, r.cur.commitLSN)
	if err != nil {
		return err
	}
	if row.decodeErr != nil {
		r.c.m.undecodable.Inc()
		r.c.cfg.Logger.Error("cdc: cannot decode event payload; publishing it with audience key 0",
			"event", row.env.EventID, "type", row.env.Type, "err", row.decodeErr)
	}
	it := item{row: row, txn: r.cur}
	r.cur.pending.Add(1)
	r.cur.submitted++
	r.c.m.inFlight.Inc()
	q := r.c.proc.lane(row.env.AudienceKey)
	select {
	case q <- it:
		return nil
	default:
	}
	t := time.NewTicker(r.c.cfg.ConfirmInterval)
	defer t.Stop()
	blockedAt := time.Now()
	for {
		select {
		case q <- it:
			r.c.m.backpressure.Add(time.Since(blockedAt).Seconds())
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			// Backpressure: Kafka is slow or down. Confirming what was
			// acknowledged also keeps the server from timing us out.
			if err := r.sendStatus(false); err != nil {
				return err
			}
		}
	}
}

// messageOf is the Kafka message of one event (docs/architecture.md).
func messageOf(row *eventRow) (*message.Message, error) {
	env, err := row.envelope()
	if err != nil {
		return nil, err
	}
	payload := appendEnvelope(make([]byte, 0, 256+len(env.Payload)), &env)
	msg := message.NewMessage(env.EventID, payload)
	msg.Metadata = kafka.EventMetadata(&env)
	return msg, nil
}

// sendStatus confirms the acknowledged position to PostgreSQL when it moved,
// when force is set (the server asked, or shutdown), or when StatusInterval
// passed in silence. Only acknowledged transactions are confirmed; when
// nothing is in flight, the server's own position is (so an idle slot does
// not hold WAL).
func (r *reader) sendStatus(force bool) error {
	p := r.c.ckpt.advance()
	confirmed := p.confirmed
	if p.idle && r.cur == nil && !r.skipping {
		confirmed = r.c.ckpt.confirmIdle(r.serverEnd)
	}
	r.c.m.confirmedLSN.Set(float64(confirmed))
	if p.oldestPending.IsZero() {
		r.c.m.lagSeconds.Set(0)
	} else {
		r.c.m.lagSeconds.Set(max(time.Since(p.oldestPending).Seconds(), 0))
	}
	prev := pglogrepl.LSN(r.c.sentLSN.Load())
	if !force && confirmed == prev && time.Since(r.lastStatus) < r.c.cfg.StatusInterval {
		return nil
	}
	if confirmed == 0 {
		// Nothing known yet: report the slot's own position (0 would be
		// ignored as "no progress" by the server anyway).
		confirmed = prev
	}
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), r.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: confirmed})
	if err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	r.lastStatus = time.Now()
	if confirmed > prev {
		r.c.sentLSN.Store(uint64(confirmed))
	}
	return nil
}
