package readmodel

import (
	"math"
	"testing"
)

func TestScoreMax(t *testing.T) {
	t.Parallel()
	if got := scoreMax(math.MaxInt64); got != "(+inf" {
		t.Errorf("first page max = %q", got)
	}
	if got := scoreMax(1234); got != "1234" {
		t.Errorf("max = %q", got)
	}
}
