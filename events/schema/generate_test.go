package schema_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/invopop/jsonschema"
	orderedmap "github.com/pb33f/ordered-map/v2"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/events/schema"
)

// update rewrites the checked-in schemas from the Go types
// (`go generate ./events/schema` runs it).
var update = flag.Bool("update", false, "rewrite the schema files from the Go types in package events")

// typePattern is a versioned event type name (post.created.v1).
const typePattern = `^[a-z][a-z0-9]*(\.[a-z][a-z0-9]*)*\.v[0-9]+$`

// reflector reflects the Go types in package events, their doc comments
// becoming the schemas' descriptions.
func reflector() (*jsonschema.Reflector, error) {
	r := &jsonschema.Reflector{DoNotReference: true, ExpandedStruct: true}
	// The comment keys are import paths joined from base and each file's
	// directory: "../events.go" under events/schema is package events.
	if err := r.AddGoComments("github.com/feedco/feed/events/schema", ".."); err != nil {
		return nil, fmt.Errorf("read the doc comments of package events: %w", err)
	}
	return r, nil
}

// generate returns the schema file of an event type and version.
func generate(r *jsonschema.Reflector, ev events.Event) ([]byte, error) {
	s := r.Reflect(ev)
	s.ID = jsonschema.ID(schema.BaseURL + ev.EventType() + ".json")
	s.Title = ev.EventType()
	annotate(reflect.TypeOf(ev), s)
	return marshal(s)
}

// generateEnvelope returns envelope.json: the envelope, its payload
// checked against the schema of the type it names.
func generateEnvelope(r *jsonschema.Reflector, types []events.Event) ([]byte, error) {
	s := r.Reflect(events.Envelope{})
	s.ID = jsonschema.ID(schema.BaseURL + schema.EnvelopeFile)
	s.Title = "event envelope"
	annotate(reflect.TypeOf(events.Envelope{}), s)
	prop := func(name string) *jsonschema.Schema {
		p, ok := s.Properties.Get(name)
		if !ok {
			panic("envelope has no property " + name)
		}
		return p
	}
	prop("eventId").Format = "uuid"
	prop("type").Pattern = typePattern
	prop("commitLsn").Pattern = `^[0-9A-F]{1,8}/[0-9A-F]{1,8}$`
	// The envelope and its metadata may gain optional fields without a
	// new version (docs/events.md): their schemas leave other properties
	// open, where a payload's schema is closed.
	s.AdditionalProperties = nil
	meta := prop("metadata")
	meta.AdditionalProperties = nil
	if tp, ok := meta.Properties.Get("traceparent"); ok {
		tp.Pattern = `^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`
	}
	payload := prop("payload")
	payload.Type = "object"
	payload.Description = "The event's payload: valid against the schema of its type, <type>.json beside this file."
	for _, ev := range types {
		s.AllOf = append(s.AllOf, &jsonschema.Schema{
			If: &jsonschema.Schema{Properties: props("type", &jsonschema.Schema{Const: ev.EventType()})},
			Then: &jsonschema.Schema{Properties: props("payload",
				&jsonschema.Schema{Ref: ev.EventType() + ".json"})},
		})
	}
	return marshal(s)
}

func props(name string, s *jsonschema.Schema) *orderedmap.OrderedMap[string, *jsonschema.Schema] {
	p := jsonschema.NewProperties()
	p.Set(name, s)
	return p
}

func marshal(s *jsonschema.Schema) ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal schema %s: %w", s.ID, err)
	}
	return append(b, '\n'), nil
}

// annotate walks a Go type beside its reflected schema and adds what the
// reflector does not say: an int64 encoded as a JSON string (`,string`)
// holds a decimal integer.
func annotate(t reflect.Type, s *jsonschema.Schema) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Slice && s.Items != nil:
		annotate(t.Elem(), s.Items)
	case t.Kind() == reflect.Struct && s.Properties != nil:
		for i := range t.NumField() {
			f := t.Field(i)
			tag := strings.Split(f.Tag.Get("json"), ",")
			name := tag[0]
			if name == "" {
				name = f.Name
			}
			p, ok := s.Properties.Get(name)
			if !ok {
				continue
			}
			if p.Type == "string" && isInt(f.Type) && hasOption(tag, "string") {
				p.Pattern = `^-?[0-9]+$`
			}
			annotate(f.Type, p)
		}
	}
}

func isInt(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

func hasOption(tag []string, opt string) bool {
	for _, o := range tag[1:] {
		if o == opt {
			return true
		}
	}
	return false
}

// generated is every schema file the types generate, by name.
func generated() (map[string][]byte, error) {
	r, err := reflector()
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, ev := range events.Registered() {
		b, err := generate(r, ev)
		if err != nil {
			return nil, err
		}
		out[ev.EventType()+".json"] = b
	}
	b, err := generateEnvelope(r, events.Registered())
	if err != nil {
		return nil, err
	}
	out[schema.EnvelopeFile] = b
	return out, nil
}

// writeAll replaces the schema files of this folder with want.
func writeAll(want map[string][]byte) error {
	old, err := filepath.Glob("*.json")
	if err != nil {
		return err
	}
	for _, n := range old {
		if _, ok := want[n]; !ok {
			if err := os.Remove(n); err != nil {
				return err
			}
		}
	}
	for n, b := range want {
		if cur, err := os.ReadFile(n); err == nil && bytes.Equal(cur, b) {
			continue
		}
		if err := os.WriteFile(n, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// filled returns a value of t with every field set (not zero), so that a
// payload exercises each property of its schema, omitempty ones included.
func filled(t reflect.Type) reflect.Value {
	v := reflect.New(t).Elem()
	switch {
	case t == reflect.TypeOf(time.Time{}):
		v.Set(reflect.ValueOf(time.Date(2026, 12, 6, 9, 41, 12, 345_000_000, time.UTC)))
	case t.Kind() == reflect.Pointer:
		p := reflect.New(t.Elem())
		p.Elem().Set(filled(t.Elem()))
		v.Set(p)
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				v.Field(i).Set(filled(t.Field(i).Type))
			}
		}
	case t.Kind() == reflect.Slice:
		v.Set(reflect.Append(reflect.MakeSlice(t, 0, 1), filled(t.Elem())))
	case t.Kind() == reflect.Map:
		v.Set(reflect.MakeMap(t))
		v.SetMapIndex(filled(t.Key()), filled(t.Elem()))
	case t.Kind() == reflect.String:
		v.SetString("x <b>&é")
	case t.Kind() == reflect.Bool:
		v.SetBool(true)
	case isInt(t) && t.Kind() >= reflect.Uint:
		v.SetUint(7)
	case isInt(t):
		v.SetInt(1<<62 + 5)
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		v.SetFloat(1.5)
	}
	return v
}
