package rebuild

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/feedco/feed/internal/kafka"
)

// admin is the part of Kafka a rebuild needs: the topic's end offsets (T0),
// seeding a new consumer group's offsets, and retiring the old group.
type admin struct {
	cl  *kgo.Client
	adm *kadm.Client
}

func newAdmin(conn kafka.Conn) (*admin, error) {
	cl, err := conn.NewClient()
	if err != nil {
		return nil, err
	}
	return &admin{cl: cl, adm: kadm.NewClient(cl)}, nil
}

func (a *admin) close() { a.cl.Close() }

// endOffsets returns the next offset of every partition of topic: every
// message produced after this call has an offset at or above it.
func (a *admin) endOffsets(ctx context.Context, topic string) (kadm.Offsets, error) {
	ends, err := a.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	offs := ends.Offsets()
	if len(offs[topic]) == 0 {
		return nil, fmt.Errorf("list end offsets of %s: topic has no partitions", topic)
	}
	return offs, nil
}

// seed commits offs as the group's position, so its first consumer starts
// there instead of at the oldest offset. The group must have no members:
// a group left by a killed rebuild keeps its member until the session
// times out, so this retries for up to a minute.
func (a *admin) seed(ctx context.Context, group string, offs kadm.Offsets) error {
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := a.adm.CommitOffsets(ctx, group, offs)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			return nil
		}
		retriable := errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) ||
			errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.CoordinatorLoadInProgress) ||
			errors.Is(err, kerr.NotCoordinator)
		if !retriable || time.Now().After(deadline) {
			return fmt.Errorf("seed offsets of group %s: %w", group, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// waitEmpty waits (bounded) until group has no members: every process that
// consumed it has stopped. It reports whether it became empty.
func (a *admin) waitEmpty(ctx context.Context, group string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		d, err := a.adm.DescribeGroups(ctx, group)
		if err == nil {
			g, ok := d[group]
			if !ok || g.Err != nil || len(g.Members) == 0 {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// deleteGroup removes a retired group's committed offsets (best effort).
func (a *admin) deleteGroup(ctx context.Context, group string) error {
	_, err := a.adm.DeleteGroups(ctx, group)
	return err
}
