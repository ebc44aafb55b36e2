package readmodel

import "testing"

// TestOrderOf: Orders compare as the log's places do (commit LSN, then
// position inside the transaction), whatever the digits' widths; a
// missing or malformed LSN gives no Order.
func TestOrderOf(t *testing.T) {
	t.Parallel()
	asc := []Order{
		OrderOf("0/FF", 900), OrderOf("0/100", 5), OrderOf("0/100", 6), OrderOf("0/B374D848", 1),
		OrderOf("1/0", 2), OrderOf("16/B374D848", 3), OrderOf("FFFFFFFF/FFFFFFFF", 1<<62),
	}
	for i := 1; i < len(asc); i++ {
		if !(asc[i-1] < asc[i]) || asc[i] == "" {
			t.Errorf("order %d %q is not after %q", i, asc[i], asc[i-1])
		}
	}
	for _, bad := range []string{"", "16", "x/1", "1/x", "100000000/0", "-1/0"} {
		if o := OrderOf(bad, 1); o != "" {
			t.Errorf("OrderOf(%q) = %q, want none", bad, o)
		}
	}
	if o := OrderOf("0/1", -1); o != "" {
		t.Errorf("a negative position gave %q", o)
	}
}
