package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// EnsureTopics creates each missing topic with its partition count. An
// existing topic with fewer partitions is an error: per-key order depends on
// the partition count, so it is never changed silently.
func EnsureTopics(ctx context.Context, conn Conn, topics map[string]int32) error {
	cl, err := conn.NewClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	existing, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	for name, parts := range topics {
		if parts < 1 {
			return fmt.Errorf("topic %s: partition count %d", name, parts)
		}
		if d, ok := existing[name]; ok && d.Err == nil {
			if got := int32(len(d.Partitions)); got != parts {
				return fmt.Errorf("topic %s exists with %d partitions, configured %d: "+
					"changing the count remaps keys to partitions; migrate deliberately", name, got, parts)
			}
			continue
		}
		// Replication factor -1: the cluster's default.replication.factor,
		// so a managed cluster (which may demand 3) gets its own durable
		// setting and the development broker up to its broker count.
		resp, err := adm.CreateTopic(ctx, parts, -1, nil, name)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
		if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", name, resp.Err)
		}
	}
	return nil
}
