package migrations_test

import (
	"context"
	"errors"
	"testing"

	"github.com/feedco/feed/internal/testenv"
	"github.com/feedco/feed/migrations"
)

// Versions may have gaps (a number reserved by a change written
// elsewhere); Check reports any embedded version the database lacks, also
// one below the newest applied.
func TestVersionGapsAndCheck(t *testing.T) {
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Version <= all[i-1].Version {
			t.Fatalf("versions out of order: %d after %d", all[i].Version, all[i-1].Version)
		}
	}
	db := testenv.NewDB(t) // migrated with Up
	ctx := context.Background()
	if err := migrations.Check(ctx, db.Pool); err != nil {
		t.Fatalf("check after Up: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version = $1`, all[0].Version); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Check(ctx, db.Pool); !errors.Is(err, migrations.ErrPending) {
		t.Fatalf("check with version %d missing below the newest: %v, want ErrPending", all[0].Version, err)
	}
}
