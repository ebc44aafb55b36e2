package events

// Registered is every event type and version the log may hold, as a zero
// value of the Go type that is its payload: the current versions and the
// old ones an upcaster reads. Its published JSON Schemas under
// events/schema are generated from these types (`go generate
// ./events/schema`), and the schema tests fail when a type constant of
// this package is missing here or its schema is missing or stale.
func Registered() []Event {
	return []Event{
		UserRegistered{},
		PostCreated{},
		PostCreatedV1{},
		PostDeleted{},
		PostEdited{},
		Followed{},
		Unfollowed{},
		Muted{},
		Unmuted{},
		Blocked{},
		Unblocked{},
		PostReposted{},
		PostUnreposted{},
		PostLiked{},
		PostUnliked{},
	}
}
