// Package events defines the facts the system records: their versioned type
// names, their payloads, the envelope they travel in, and the codec that turns
// stored or streamed bytes back into current-version events. It imports
// nothing of ours, so every other package can depend on it.
package events

import (
	"strconv"
	"time"
)

// Versioned event type names. A payload change that old readers cannot
// ignore gets a new version and an upcaster from the old one (see Codec).
// WARNING: these strings are stored in the log and in Kafka forever; never
// rename one.
const (
	TypeUserRegistered = "user.registered.v1"
	TypePostCreated    = "post.created.v1"
	TypePostDeleted    = "post.deleted.v1"
	TypePostEdited     = "post.edited.v1"
	TypeFollowed       = "user.followed.v1"
	TypeUnfollowed     = "user.unfollowed.v1"
	TypeMuted          = "user.muted.v1"
	TypeUnmuted        = "user.unmuted.v1"
	TypeBlocked        = "user.blocked.v1"
	TypeUnblocked      = "user.unblocked.v1"
)

// Event is implemented by every payload type.
type Event interface {
	// EventType is the versioned type name stored with the event.
	EventType() string
	// StreamID names the stream the event is appended to; optimistic
	// concurrency is per stream.
	StreamID() string
	// AudienceKey is the account whose audience the event concerns: the
	// author for post events, the followee for follow events. It is the
	// Kafka message key, so one partition holds, in order, everything about
	// one account's posts and its followers.
	AudienceKey() int64
}

// UserRegistered: a new account exists.
type UserRegistered struct {
	UserID int64  `json:"userId,string"`
	Name   string `json:"name"`
}

// PostCreated: an author published a post. AuthorFollowers is the author's
// follower count in the transaction that created the post (facts, not policy:
// projectors decide push or pull from it with their own threshold).
type PostCreated struct {
	PostID          int64     `json:"postId,string"`
	AuthorID        int64     `json:"authorId,string"`
	Content         string    `json:"content"`
	CreatedAt       time.Time `json:"createdAt"`
	AuthorFollowers int64     `json:"authorFollowers"`
}

// PostDeleted: the author deleted a post.
type PostDeleted struct {
	PostID    int64     `json:"postId,string"`
	AuthorID  int64     `json:"authorId,string"`
	DeletedAt time.Time `json:"deletedAt"`
}

// PostEdited: the author replaced a post's content. Version is the
// post's stream version this event is appended at (the post is version 1
// when created, each edit adds one), so consumers order a post's edits by
// it alone: an edit whose Version is not above what they hold is older
// (a redelivery) and changes nothing. Content is the whole new text.
// AuthorID keys it with the author's other post events; the post's
// creation time (its Snowflake millisecond) does not change.
type PostEdited struct {
	PostID   int64     `json:"postId,string"`
	AuthorID int64     `json:"authorId,string"`
	Content  string    `json:"content"`
	Version  int64     `json:"version"`
	EditedAt time.Time `json:"editedAt"`
}

// Followed: FollowerID now follows FolloweeID. FolloweeFollowers is the
// followee's follower count after this event, so crossing the celebrity
// threshold is visible in the stream itself.
type Followed struct {
	FollowerID        int64 `json:"followerId,string"`
	FolloweeID        int64 `json:"followeeId,string"`
	FolloweeFollowers int64 `json:"followeeFollowers"`
}

// Unfollowed: FollowerID no longer follows FolloweeID. FolloweeFollowers is
// the followee's follower count after this event.
type Unfollowed struct {
	FollowerID        int64 `json:"followerId,string"`
	FolloweeID        int64 `json:"followeeId,string"`
	FolloweeFollowers int64 `json:"followeeFollowers"`
}

// Muted: MuterID no longer wants MutedID's posts in their home feed; the
// follow between them, if any, stays. Mutes are facts of the muted
// account's audience (keyed by MutedID), so they sit in commit order with
// that account's posts and follows. Following and MutedFollowers are the
// state of the pair in the same transaction: whether the muter follows the
// muted account, and that account's follower count.
type Muted struct {
	MuterID        int64 `json:"muterId,string"`
	MutedID        int64 `json:"mutedId,string"`
	Following      bool  `json:"following"`
	MutedFollowers int64 `json:"mutedFollowers"`
}

// Unmuted: MuterID wants MutedID's posts again. Following and
// MutedFollowers as in Muted: an unmute of a followed account below the
// celebrity threshold brings its recent posts back into the inbox, as a
// follow does.
type Unmuted struct {
	MuterID        int64 `json:"muterId,string"`
	MutedID        int64 `json:"mutedId,string"`
	Following      bool  `json:"following"`
	MutedFollowers int64 `json:"mutedFollowers"`
}

// Blocked: BlockerID blocked BlockedID. The same transaction removed every
// follow between the two (each with its own Unfollowed), and neither can
// follow the other while the block stands.
type Blocked struct {
	BlockerID int64 `json:"blockerId,string"`
	BlockedID int64 `json:"blockedId,string"`
}

// Unblocked: BlockerID lifted the block of BlockedID. No follow comes back.
type Unblocked struct {
	BlockerID int64 `json:"blockerId,string"`
	BlockedID int64 `json:"blockedId,string"`
}

func (UserRegistered) EventType() string { return TypeUserRegistered }
func (Muted) EventType() string          { return TypeMuted }
func (Unmuted) EventType() string        { return TypeUnmuted }
func (Blocked) EventType() string        { return TypeBlocked }
func (Unblocked) EventType() string      { return TypeUnblocked }

func (e Muted) StreamID() string     { return MuteStream(e.MuterID, e.MutedID) }
func (e Unmuted) StreamID() string   { return MuteStream(e.MuterID, e.MutedID) }
func (e Blocked) StreamID() string   { return BlockStream(e.BlockerID, e.BlockedID) }
func (e Unblocked) StreamID() string { return BlockStream(e.BlockerID, e.BlockedID) }

func (e Muted) AudienceKey() int64     { return e.MutedID }
func (e Unmuted) AudienceKey() int64   { return e.MutedID }
func (e Blocked) AudienceKey() int64   { return e.BlockedID }
func (e Unblocked) AudienceKey() int64 { return e.BlockedID }

func (PostCreated) EventType() string { return TypePostCreated }
func (PostDeleted) EventType() string { return TypePostDeleted }
func (PostEdited) EventType() string  { return TypePostEdited }
func (Followed) EventType() string    { return TypeFollowed }
func (Unfollowed) EventType() string  { return TypeUnfollowed }

func (e UserRegistered) StreamID() string { return UserStream(e.UserID) }
func (e PostCreated) StreamID() string    { return PostStream(e.PostID) }
func (e PostDeleted) StreamID() string    { return PostStream(e.PostID) }
func (e PostEdited) StreamID() string     { return PostStream(e.PostID) }
func (e Followed) StreamID() string       { return FollowStream(e.FollowerID, e.FolloweeID) }
func (e Unfollowed) StreamID() string     { return FollowStream(e.FollowerID, e.FolloweeID) }

func (e UserRegistered) AudienceKey() int64 { return e.UserID }
func (e PostCreated) AudienceKey() int64    { return e.AuthorID }
func (e PostDeleted) AudienceKey() int64    { return e.AuthorID }
func (e PostEdited) AudienceKey() int64     { return e.AuthorID }
func (e Followed) AudienceKey() int64       { return e.FolloweeID }
func (e Unfollowed) AudienceKey() int64     { return e.FolloweeID }

// UserStream is the stream of one account's registration.
func UserStream(userID int64) string { return "user-" + strconv.FormatInt(userID, 10) }

// PostStream is the stream of one post: created at version 1, each edit
// at the next version, deleted at the version after the last edit (2 for
// a post never edited).
func PostStream(postID int64) string { return "post-" + strconv.FormatInt(postID, 10) }

// FollowStream is the stream of one (follower, followee) relationship; its
// versions order that pair's follows and unfollows.
func FollowStream(followerID, followeeID int64) string {
	return "follow-" + strconv.FormatInt(followerID, 10) + "-" + strconv.FormatInt(followeeID, 10)
}

// MuteStream is the stream of one (muter, muted) pair; its versions
// alternate Muted (odd) and Unmuted (even).
func MuteStream(muterID, mutedID int64) string {
	return "mute-" + strconv.FormatInt(muterID, 10) + "-" + strconv.FormatInt(mutedID, 10)
}

// BlockStream is the stream of one (blocker, blocked) pair; its versions
// alternate Blocked (odd) and Unblocked (even).
func BlockStream(blockerID, blockedID int64) string {
	return "block-" + strconv.FormatInt(blockerID, 10) + "-" + strconv.FormatInt(blockedID, 10)
}
