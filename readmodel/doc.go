// Package readmodel owns the Redis read models: every key name, Lua
// script, sentinel, TTL, trim and bound rule of the inboxes, timelines,
// follower sets and counts, the celebrity set, the post cache, the
// projection version registry and the rebuild status key. The projectors
// that write them and the query side that reads them call its operations,
// so they agree. Every key of one account carries that account's id as a
// Redis Cluster hash tag.
package readmodel
