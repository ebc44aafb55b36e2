package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/feedco/feed/internal/auth"
)

func newTokenCommand(c *cli) *cobra.Command {
	var user int64
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "token --user ID [--ttl 24h]",
		Short: "Print a signed bearer token for a user",
		Long: longHelp("Prints an HS256 bearer token for the user, signed with FEED_JWT_SECRET, with sub, iat and exp "+
			"(now + --ttl), and iss and aud when FEED_JWT_ISSUER and FEED_JWT_AUDIENCE are set: the claims `feed api` requires.",
			[]string{"FEED_JWT_SECRET", "FEED_JWT_ISSUER", "FEED_JWT_AUDIENCE"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if user <= 0 {
				return usageError{"--user ID is required (a positive integer)"}
			}
			if ttl <= 0 {
				return flagUsage("ttl", "must be positive")
			}
			cfg, _, err := c.config()
			if err != nil {
				return err
			}
			s, err := auth.New(cfg.JWT())
			if err != nil {
				return usageError{err.Error()}
			}
			_, err = fmt.Fprintln(c.stdout, s.Sign(user, ttl))
			return err
		},
	}
	cmd.Flags().Int64Var(&user, "user", 0, "user id (required)")
	cmd.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "validity")
	return cmd
}
