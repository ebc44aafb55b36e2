package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/feedco/feed/projections"
)

// newPoisonCommand is `feed poison`: the poison queue's lifecycle
// (docs/projections.md, "The poison queue").
func newPoisonCommand(c *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "poison",
		Short: "The poison queue: list, show, replay and discard the messages the projectors could not handle",
		Long: longHelp("The records of FEED_TOPIC.poison, each named partition:offset, with what became of them (pending,\n"+
			"replayed, discarded; kept in PostgreSQL). `replay` puts them back into their consumer group's handling\n"+
			"in per-key order (the poisoned event, then every later event of its key from the log), safe to repeat.",
			envPostgres, envRedis, envKafka, envProjections),
		Args: noArgs,
	}
	cmd.AddCommand(newPoisonListCommand(c), newPoisonShowCommand(c), newPoisonReplayCommand(c), newPoisonDiscardCommand(c))
	return cmd
}

func newPoisonListCommand(c *cli) *cobra.Command {
	var group string
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the pending poisoned messages (of one consumer group)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPoisonQueue(cmd.Context(), c, false, func(ctx context.Context, a *App, q *projections.PoisonQueue) error {
				es, err := q.List(ctx, group, all)
				if err != nil {
					return err
				}
				return printPoisonList(c.stdout, es)
			})
		},
	}
	cmd.Flags().StringVar(&group, "group", "", "only this consumer group's (e.g. feed.projection.inbox.v1)")
	cmd.Flags().BoolVar(&all, "all", false, "replayed and discarded ones too")
	return cmd
}

func newPoisonShowCommand(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Print one poisoned message (ID is partition:offset, from `feed poison list`) as JSON",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{"feed poison show takes one ID (partition:offset)"}
			}
			if _, _, err := projections.ParsePoisonID(args[0]); err != nil {
				return usageError{err.Error()}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPoisonQueue(cmd.Context(), c, false, func(ctx context.Context, _ *App, q *projections.PoisonQueue) error {
				e, err := q.Get(ctx, args[0])
				if err != nil {
					return err
				}
				return printPoisonEntry(c.stdout, e)
			})
		},
	}
}

func newPoisonReplayCommand(c *cli) *cobra.Command {
	var sel projections.PoisonSelect
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Put poisoned messages back into their group's handling, in per-key order (after fixing the cause)",
		Long: longHelp("Per consumer group and Kafka key, applies the earliest pending poisoned event with that group's projector\n"+
			"(at its active version and recorded policy), then every later event of the same key from the event log,\n"+
			"so the read model ends as if the key's events had been handled in order; then records them as replayed.\n"+
			"Projectors are idempotent, so a replay is safe to repeat (--id replays an entry in any state). A key that\n"+
			"fails again stays pending, and the command exits 1.",
			envPostgres, envRedis, envKafka, envProjections),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sel.Group == "" && sel.ID == "" && !sel.All {
				return usageError{"feed poison replay: choose --group G, --id ID or --all"}
			}
			return withPoisonQueue(cmd.Context(), c, true, func(ctx context.Context, a *App, q *projections.PoisonQueue) error {
				cfg, err := resolvePolicy(ctx, a.Cfg, a.Pool, a.Log)
				if err != nil {
					return err
				}
				pcfg := projectionConfig(cfg)
				res, err := q.Replay(ctx, sel, func(ctx context.Context, group string) (projections.Projector, error) {
					return projections.ProjectorForGroup(ctx, pcfg, "", a.Pool, a.Redis, group)
				})
				failed := 0
				for _, r := range res {
					ids := make([]string, len(r.Entries))
					for i, e := range r.Entries {
						ids[i] = e.ID
					}
					if r.Err != nil {
						failed++
						fmt.Fprintf(c.stdout, "%s key %s: NOT replayed (%s): %v\n", r.Group, r.Key, strings.Join(ids, ","), r.Err)
						continue
					}
					fmt.Fprintf(c.stdout, "%s key %s: replayed %s (%d events applied)\n", r.Group, r.Key, strings.Join(ids, ","), r.Applied)
				}
				if err != nil {
					return err
				}
				if len(res) == 0 {
					fmt.Fprintln(c.stdout, "nothing pending to replay")
				}
				if failed > 0 {
					return fmt.Errorf("%d of %d keys not replayed", failed, len(res))
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&sel.Group, "group", "", "the pending messages of this consumer group")
	cmd.Flags().StringVar(&sel.ID, "id", "", "one message (partition:offset), in any state")
	cmd.Flags().BoolVar(&sel.All, "all", false, "every pending message")
	return cmd
}

func newPoisonDiscardCommand(c *cli) *cobra.Command {
	var sel projections.PoisonSelect
	cmd := &cobra.Command{
		Use:   "discard",
		Short: "Record poisoned messages as discarded: they leave the pending list (the records stay in the topic)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sel.Group == "" && sel.ID == "" && !sel.All {
				return usageError{"feed poison discard: choose --group G, --id ID or --all"}
			}
			return withPoisonQueue(cmd.Context(), c, false, func(ctx context.Context, _ *App, q *projections.PoisonQueue) error {
				es, err := q.Discard(ctx, sel)
				if err != nil {
					return err
				}
				for _, e := range es {
					fmt.Fprintf(c.stdout, "discarded %s (%s, %s)\n", e.ID, e.Group, e.Type)
				}
				if len(es) == 0 {
					fmt.Fprintln(c.stdout, "nothing pending to discard")
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&sel.Group, "group", "", "the pending messages of this consumer group")
	cmd.Flags().StringVar(&sel.ID, "id", "", "one message (partition:offset)")
	cmd.Flags().BoolVar(&sel.All, "all", false, "every pending message")
	return cmd
}

// withPoisonQueue opens PostgreSQL (and Redis when wantRedis) and the
// poison queue, and runs f.
func withPoisonQueue(ctx context.Context, c *cli, wantRedis bool, f func(context.Context, *App, *projections.PoisonQueue) error) error {
	cfg, log, err := c.config()
	if err != nil {
		return err
	}
	a, err := openApp(ctx, cfg, log, true, wantRedis)
	if err != nil {
		return err
	}
	defer a.Close()
	q, err := projections.NewPoisonQueue(connOf(cfg), cfg.Topic, a.Pool)
	if err != nil {
		return err
	}
	err = f(ctx, a, q)
	if errors.Is(err, projections.ErrPoisonNotFound) {
		return usageError{err.Error()}
	}
	return err
}

// printPoisonList prints entries as a table.
func printPoisonList(w io.Writer, es []projections.PoisonEntry) error {
	if len(es) == 0 {
		_, err := fmt.Fprintln(w, "no poisoned messages")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tGROUP\tTYPE\tKEY\tPOSITION\tPOISONED\tREASON")
	for _, e := range es {
		reason := e.Reason
		if i := strings.IndexByte(reason, '\n'); i >= 0 {
			reason = reason[:i]
		}
		if len(reason) > 80 {
			reason = reason[:77] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.ID, e.State, e.Group, e.Type, e.Key, e.Position,
			e.PoisonedAt.Format(time.RFC3339), reason)
	}
	return tw.Flush()
}

// printPoisonEntry prints one entry as indented JSON, the payload as JSON
// when it is (else as a string).
func printPoisonEntry(w io.Writer, e projections.PoisonEntry) error {
	out := map[string]any{
		"id": e.ID, "state": e.State, "group": e.Group, "reason": e.Reason, "type": e.Type, "key": e.Key,
		"position": fmt.Sprint(e.Position), "uuid": e.UUID, "poisonedAt": e.PoisonedAt.Format(time.RFC3339Nano),
		"metadata": e.Metadata,
	}
	if !e.ResolvedAt.IsZero() {
		out["resolvedAt"] = e.ResolvedAt.Format(time.RFC3339Nano)
	}
	if json.Valid(e.Payload) {
		out["payload"] = json.RawMessage(e.Payload)
	} else {
		out["payload"] = string(e.Payload)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
