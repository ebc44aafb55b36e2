package queries

import (
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
)

// pageSource turns a read page of an inbox or a timeline (readmodel.Page)
// into a source.
func pageSource(p readmodel.Page) source { return zsource(p.Reply, p.Limit, p.Floor) }

// setResultOf turns a queued set read into a setResult once its pipeline
// ran.
func setResultOf(r readmodel.SetRead) (setResult, error) {
	p, err := r.Result()
	if err != nil {
		return setResult{}, err
	}
	return setResult{src: pageSource(p), built: p.Built}, nil
}

// packedResultOf turns a queued packed inbox read into a setResult once
// its pipeline ran.
func packedResultOf(r homefeed.Read) (setResult, error) {
	p, err := r.Result()
	if err != nil {
		return setResult{}, err
	}
	return setResult{src: packedSource(p), built: p.Built}, nil
}

// unknownSource is a read model that is not complete (no ~built): it is
// sure of nothing, so the page continues from PostgreSQL at once.
var unknownSource = source{bound: startKey, floor: true}

// rangeSource turns a queued range read of a timeline into a source once
// its pipeline ran, and reports whether the timeline is built: one that
// is not is unknownSource.
func rangeSource(r readmodel.RangeRead) (source, bool, error) {
	p, err := r.Result()
	if err != nil {
		return source{}, false, err
	}
	if !p.Built {
		return unknownSource, false, nil
	}
	return pageSource(p), true, nil
}
