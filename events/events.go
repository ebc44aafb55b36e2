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
	TypePostCreated    = "post.created.v2"
	TypePostDeleted    = "post.deleted.v1"
	TypePostEdited     = "post.edited.v1"
	TypeFollowed       = "user.followed.v1"
	TypeUnfollowed     = "user.unfollowed.v1"
	TypeMuted          = "user.muted.v1"
	TypeUnmuted        = "user.unmuted.v1"
	TypeBlocked        = "user.blocked.v1"
	TypeUnblocked      = "user.unblocked.v1"
	TypePostReposted   = "post.reposted.v1"
	TypePostUnreposted = "post.unreposted.v1"
	TypePostLiked      = "post.liked.v1"
	TypePostUnliked    = "post.unliked.v1"
)

// Old versions: stored in logs written before their successor, read
// through an upcaster (DefaultCodec), never written.
const (
	// TypePostCreatedV1 is a post without reply, quote or media; it reads
	// as TypePostCreated with those fields empty.
	TypePostCreatedV1 = "post.created.v1"
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

// PostCreated (post.created.v2): an author published a post.
// AuthorFollowers is the author's follower count in the transaction that
// created the post (facts, not policy: projectors decide push or pull from
// it with their own threshold).
//
// A reply names its parent (ReplyTo), the parent's author (ReplyToAuthor)
// and the thread's root (ReplyRoot: the parent's root, or the parent when
// it is no reply); a quote names the quoted post and its author (QuoteOf,
// QuoteAuthor). A post may be both. The ids are those of posts (a repost's
// id given by the client is resolved to its original by the write side).
// Media are references to objects stored elsewhere, at most 4. Every one
// of these fields is absent (zero) for a plain post, which is how a
// post.created.v1 reads.
//
// ParentReplies is a reply's parent's reply count after this post (the
// parent's row is locked for the change, and the event appended after
// it, so for one parent position order is the order of its counts).
// Absent for a post that replies to nothing, and in events written
// before it existed: a consumer then leaves the count to a rebuild.
type PostCreated struct {
	PostID          int64     `json:"postId,string"`
	AuthorID        int64     `json:"authorId,string"`
	Content         string    `json:"content"`
	CreatedAt       time.Time `json:"createdAt"`
	AuthorFollowers int64     `json:"authorFollowers"`
	ReplyTo         int64     `json:"replyTo,string,omitempty"`
	ReplyRoot       int64     `json:"replyRoot,string,omitempty"`
	ReplyToAuthor   int64     `json:"replyToAuthor,string,omitempty"`
	QuoteOf         int64     `json:"quoteOf,string,omitempty"`
	QuoteAuthor     int64     `json:"quoteAuthor,string,omitempty"`
	Media           []Media   `json:"media,omitempty"`
	ParentReplies   *int64    `json:"parentReplies,omitempty"`
}

// PostCreatedV1 is the payload of post.created.v1, the first version of
// PostCreated: a post without reply, quote or media. The writer no longer
// writes it; logs written before post.created.v2 hold it, and the codec
// upcasts it (DefaultCodec). It stays a type so that its published schema
// is still generated.
type PostCreatedV1 struct {
	PostID          int64     `json:"postId,string"`
	AuthorID        int64     `json:"authorId,string"`
	Content         string    `json:"content"`
	CreatedAt       time.Time `json:"createdAt"`
	AuthorFollowers int64     `json:"authorFollowers"`
}

// EventType implements Event.
func (PostCreatedV1) EventType() string { return TypePostCreatedV1 }

// StreamID implements Event.
func (e PostCreatedV1) StreamID() string { return PostStream(e.PostID) }

// AudienceKey implements Event.
func (e PostCreatedV1) AudienceKey() int64 { return e.AuthorID }

// Media is one attachment of a post: a reference to an image or a video
// stored elsewhere (an https URL), its MIME type, its alternative text
// (may be empty) and its dimensions in pixels.
type Media struct {
	URL      string `json:"url"`
	MIMEType string `json:"mimeType"`
	Alt      string `json:"alt"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
}

// PostDeleted: the author deleted a post. ReplyTo is the post's parent
// when it is a reply (whose reply count the deletion lowered), absent
// otherwise. Reposts and likes of the post stay as they are: no
// unrepost or unlike follows a deletion; readers hide what points at a
// deleted post.
type PostDeleted struct {
	PostID    int64     `json:"postId,string"`
	AuthorID  int64     `json:"authorId,string"`
	DeletedAt time.Time `json:"deletedAt"`
	ReplyTo   int64     `json:"replyTo,string,omitempty"`
	// ParentReplies is, for a deleted reply, its parent's reply count
	// after the deletion (present when 0; absent for a post that is no
	// reply and in events written before it existed), ordered by
	// position as PostCreated.ParentReplies is.
	ParentReplies *int64 `json:"parentReplies,omitempty"`
}

// PostReposted: ReposterID reposted PostID (by AuthorID). The repost is
// an entry of its own in feeds: RepostID is a Snowflake id of its own and
// CreatedAt its millisecond. A repost of a repost names the original.
// Reposts are facts of the reposter's audience (keyed by ReposterID):
// its followers see it, pushed or pulled by ReposterFollowers, the
// reposter's follower count in the same transaction, as a post by the
// reposter would be. Reposts is the original's repost count after this
// event.
type PostReposted struct {
	RepostID          int64     `json:"repostId,string"`
	ReposterID        int64     `json:"reposterId,string"`
	PostID            int64     `json:"postId,string"`
	AuthorID          int64     `json:"authorId,string"`
	CreatedAt         time.Time `json:"createdAt"`
	ReposterFollowers int64     `json:"reposterFollowers"`
	Reposts           int64     `json:"reposts"`
}

// PostUnreposted: ReposterID undid its repost RepostID of PostID (by
// AuthorID). Reposts is the original's repost count after this event.
type PostUnreposted struct {
	RepostID     int64     `json:"repostId,string"`
	ReposterID   int64     `json:"reposterId,string"`
	PostID       int64     `json:"postId,string"`
	AuthorID     int64     `json:"authorId,string"`
	UnrepostedAt time.Time `json:"unrepostedAt"`
	Reposts      int64     `json:"reposts"`
}

// PostLiked: LikerID liked PostID (by AuthorID). Likes are facts of the
// liked post's author (keyed by AuthorID): they sit in commit order with
// that author's posts and deletions, and whoever notifies the author reads
// one partition. Likes is the post's like count after this event.
type PostLiked struct {
	LikerID  int64     `json:"likerId,string"`
	PostID   int64     `json:"postId,string"`
	AuthorID int64     `json:"authorId,string"`
	LikedAt  time.Time `json:"likedAt"`
	Likes    int64     `json:"likes"`
}

// PostUnliked: LikerID took back its like of PostID (by AuthorID). Likes
// is the post's like count after this event.
type PostUnliked struct {
	LikerID   int64     `json:"likerId,string"`
	PostID    int64     `json:"postId,string"`
	AuthorID  int64     `json:"authorId,string"`
	UnlikedAt time.Time `json:"unlikedAt"`
	Likes     int64     `json:"likes"`
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

func (PostReposted) EventType() string   { return TypePostReposted }
func (PostUnreposted) EventType() string { return TypePostUnreposted }
func (PostLiked) EventType() string      { return TypePostLiked }
func (PostUnliked) EventType() string    { return TypePostUnliked }

func (e PostReposted) StreamID() string   { return RepostStream(e.ReposterID, e.PostID) }
func (e PostUnreposted) StreamID() string { return RepostStream(e.ReposterID, e.PostID) }
func (e PostLiked) StreamID() string      { return LikeStream(e.LikerID, e.PostID) }
func (e PostUnliked) StreamID() string    { return LikeStream(e.LikerID, e.PostID) }

func (e PostReposted) AudienceKey() int64   { return e.ReposterID }
func (e PostUnreposted) AudienceKey() int64 { return e.ReposterID }
func (e PostLiked) AudienceKey() int64      { return e.AuthorID }
func (e PostUnliked) AudienceKey() int64    { return e.AuthorID }

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

// RepostStream is the stream of one (reposter, original) pair; its
// versions alternate PostReposted (odd) and PostUnreposted (even).
func RepostStream(reposterID, postID int64) string {
	return "repost-" + strconv.FormatInt(reposterID, 10) + "-" + strconv.FormatInt(postID, 10)
}

// LikeStream is the stream of one (liker, post) pair; its versions
// alternate PostLiked (odd) and PostUnliked (even).
func LikeStream(likerID, postID int64) string {
	return "like-" + strconv.FormatInt(likerID, 10) + "-" + strconv.FormatInt(postID, 10)
}
