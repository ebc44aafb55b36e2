package api

import (
	"testing"

	"github.com/google/uuid"
)

func TestNewRequestID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := newRequestID()
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 || u.String() != id || seen[id] {
			t.Fatalf("request id %q: %v, version %v, variant %v", id, err, u.Version(), u.Variant())
		}
		seen[id] = true
	}
}
