package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Room is what the database keeps of a sale's waiting room (migration
// 020): the secret of its draw and the commitment to it, its admission
// rate now, and the draw's published record once it ran. The room's
// places are Redis's; the store never reads the record or the secret, the
// service writes and reads them as they are.
type Room struct {
	SaleID     string
	Secret     string // 64 hex characters, revealed by the draw
	Commitment string // published from the start
	RatePerS   int64  // admissions per second now; 0: automatic
	// Draw is the draw's published record (JSON), nil until the draw ran.
	Draw      []byte
	DrawnAt   time.Time
	CreatedAt time.Time
}

// ErrNoRoom matches the error of a room look-up of a sale without one (or
// of no sale).
var ErrNoRoom = errors.New("store: the sale has no room")

// CreateRoom records the room of a sale the database holds. The room goes
// with its sale: DeleteSale (a create rolled back) removes it too.
func (s *Store) CreateRoom(ctx context.Context, r Room) error {
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now()
	}
	_, err := s.exec(ctx, s.db, `INSERT INTO rooms (sale_id, secret, commitment, rate_per_s, created_at)
		VALUES (?, ?, ?, ?, ?)`, r.SaleID, r.Secret, r.Commitment, r.RatePerS, ms(r.CreatedAt))
	if err != nil {
		return fmt.Errorf("store: create the room of sale %s: %w", r.SaleID, err)
	}
	return nil
}

// Room reads a sale's room; a sale without one is ErrNoRoom.
func (s *Store) Room(ctx context.Context, saleID string) (Room, error) {
	r := Room{SaleID: saleID}
	var draw string
	var drawnAt, createdAt int64
	err := s.queryRow(ctx, s.db, `SELECT secret, commitment, rate_per_s, draw, drawn_at, created_at FROM rooms WHERE sale_id = ?`, saleID).
		Scan(&r.Secret, &r.Commitment, &r.RatePerS, &draw, &drawnAt, &createdAt)
	if errors.Is(err, sql.ErrNoRows) {
		return Room{}, fmt.Errorf("%w: sale %s", ErrNoRoom, saleID)
	}
	if err != nil {
		return Room{}, fmt.Errorf("store: read the room of sale %s: %w", saleID, err)
	}
	if draw != "" {
		r.Draw = []byte(draw)
	}
	r.DrawnAt, r.CreatedAt = fromMs(drawnAt), fromMs(createdAt)
	return r, nil
}

// SaveDraw records the room's draw unless one is recorded already, and
// returns the one recorded: the first of several instances drawing at once
// wins, and every one goes on with its record. A sale without a room is
// ErrNoRoom.
func (s *Store) SaveDraw(ctx context.Context, saleID string, draw []byte, at time.Time) ([]byte, error) {
	if len(draw) == 0 {
		return nil, fmt.Errorf("store: save the draw of sale %s: an empty record", saleID)
	}
	if _, err := s.exec(ctx, s.db, `UPDATE rooms SET draw = ?, drawn_at = ? WHERE sale_id = ? AND draw = ''`,
		string(draw), ms(at), saleID); err != nil {
		return nil, fmt.Errorf("store: save the draw of sale %s: %w", saleID, err)
	}
	r, err := s.Room(ctx, saleID)
	if err != nil {
		return nil, err
	}
	return r.Draw, nil
}

// SetRoomRate records the room's admission rate now (0: automatic).
func (s *Store) SetRoomRate(ctx context.Context, saleID string, ratePerS int64) error {
	res, err := s.exec(ctx, s.db, `UPDATE rooms SET rate_per_s = ? WHERE sale_id = ?`, ratePerS, saleID)
	if err != nil {
		return fmt.Errorf("store: set the room rate of sale %s: %w", saleID, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("%w: sale %s", ErrNoRoom, saleID)
	}
	return nil
}

// RoomSales returns the ids of the sales with a room that are not
// archiving: the rooms the service's loop steps (read every second
// or so, so the list does not grow with every sale ever run).
func (s *Store) RoomSales(ctx context.Context) ([]string, error) {
	rows, err := s.query(ctx, s.db, `SELECT r.sale_id FROM rooms r JOIN sales s ON s.id = r.sale_id
		WHERE s.archiving_at = 0 AND s.archived_at = 0`)
	if err != nil {
		return nil, fmt.Errorf("store: list the sales with a room: %w", err)
	}
	ids, err := scanStrings(rows)
	if err != nil {
		return nil, fmt.Errorf("store: list the sales with a room: %w", err)
	}
	return ids, nil
}
