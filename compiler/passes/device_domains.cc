// Device domains: union-find with function domains, soft edges and the solver.
#include "compiler/passes/device_domains.h"

#include <deque>

namespace kiln::compiler {

int DeviceDomains::leaf(bool scalar) {
  Node n;
  n.parent = static_cast<int>(nodes_.size());
  n.scalar = scalar;
  nodes_.push_back(n);
  device_.push_back(-1);
  return n.parent;
}

int DeviceDomains::func(std::span<const int> params, int result) {
  Node n;
  n.parent = static_cast<int>(nodes_.size());
  n.func = true;
  n.firstChild = static_cast<uint32_t>(children_.size());
  n.numChildren = static_cast<uint32_t>(params.size() + 1);
  children_.insert(children_.end(), params.begin(), params.end());
  children_.push_back(result);
  nodes_.push_back(n);
  device_.push_back(-1);
  return n.parent;
}

int DeviceDomains::find(int x) {
  while (nodes_[static_cast<size_t>(x)].parent != x) {
    int p = nodes_[static_cast<size_t>(x)].parent;
    nodes_[static_cast<size_t>(x)].parent = nodes_[static_cast<size_t>(p)].parent;
    x = p;
  }
  return x;
}

std::span<const int> DeviceDomains::params(int f) {
  const Node& n = nodes_[static_cast<size_t>(find(f))];
  if (!n.func) return {};
  return {children_.data() + n.firstChild, n.numChildren - 1};
}

int DeviceDomains::result(int f) {
  const Node& n = nodes_[static_cast<size_t>(find(f))];
  return n.func ? children_[n.firstChild + n.numChildren - 1] : find(f);
}

void DeviceDomains::leaves(int x, std::vector<int>& out) {
  // Function domains nest as deep as function types do: a small explicit stack.
  std::vector<int> stack{x};
  while (!stack.empty()) {
    int r = find(stack.back());
    stack.pop_back();
    const Node& n = nodes_[static_cast<size_t>(r)];
    if (!n.func) {
      out.push_back(r);
      continue;
    }
    for (uint32_t i = n.numChildren; i-- > 0;) stack.push_back(children_[n.firstChild + i]);
  }
}

void DeviceDomains::link(int a, int b) {
  Node& x = nodes_[static_cast<size_t>(a)];
  Node& y = nodes_[static_cast<size_t>(b)];
  bool scalar = x.scalar && y.scalar;
  if (x.rank < y.rank) {
    x.parent = b;
    y.scalar = scalar;
  } else {
    y.parent = a;
    x.scalar = scalar;
    if (x.rank == y.rank) ++x.rank;
  }
}

void DeviceDomains::unify(int a, int b) {
  pending_.emplace_back(a, b);
  std::vector<int> ls;
  while (!pending_.empty()) {
    auto [p, q] = pending_.back();
    pending_.pop_back();
    int x = find(p), y = find(q);
    if (x == y) continue;
    const Node nx = nodes_[static_cast<size_t>(x)], ny = nodes_[static_cast<size_t>(y)];
    if (!nx.func && !ny.func) {
      link(x, y);
    } else if (nx.func && ny.func && nx.numChildren == ny.numChildren) {
      link(x, y);
      for (uint32_t i = 0; i < nx.numChildren; ++i)
        pending_.emplace_back(children_[nx.firstChild + i], children_[ny.firstChild + i]);
    } else {
      // Different shapes (a type variable met a function type): collapse both
      // into one device. The two roots stay apart; their leaves are joined.
      ls.clear();
      leaves(x, ls);
      leaves(y, ls);
      for (size_t i = 1; i < ls.size(); ++i) pending_.emplace_back(ls[0], ls[i]);
    }
  }
}

void DeviceDomains::soft(int a, int b) {
  int x = find(a), y = find(b);
  if (!nodes_[static_cast<size_t>(x)].func && !nodes_[static_cast<size_t>(y)].func) {
    soft_.emplace_back(x, y);
    return;
  }
  std::vector<int> la, lb;
  leaves(x, la);
  leaves(y, lb);
  if (la.size() != lb.size()) {
    unify(x, y);  // shapes differ: no copy can separate them
    return;
  }
  for (size_t i = 0; i < la.size(); ++i) soft_.emplace_back(la[i], lb[i]);
}

bool DeviceDomains::fix(int x, int device, bool source) {
  int r = find(x);
  int& d = device_[static_cast<size_t>(r)];
  if (d >= 0) return d == device;
  d = device;
  if (source) fixOrder_.push_back(r);
  return true;
}

void DeviceDomains::fixScalars(int host) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    int r = find(static_cast<int>(i));
    const Node& n = nodes_[static_cast<size_t>(r)];
    if (!n.func && n.scalar && device_[static_cast<size_t>(r)] < 0) fix(r, host, false);
  }
}

void DeviceDomains::solve(int fallback) {
  // Soft edges between roots, as adjacency lists (CSR).
  std::vector<uint32_t> start(nodes_.size() + 1, 0);
  std::vector<std::pair<int, int>> edges;
  edges.reserve(soft_.size());
  for (auto [a, b] : soft_) {
    int x = find(a), y = find(b);
    if (x == y) continue;
    edges.emplace_back(x, y);
    ++start[static_cast<size_t>(x) + 1];
    ++start[static_cast<size_t>(y) + 1];
  }
  for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  std::vector<int> adj(start.back());
  std::vector<uint32_t> fill(start.begin(), start.end() - 1);
  for (auto [x, y] : edges) {
    adj[fill[static_cast<size_t>(x)]++] = y;
    adj[fill[static_cast<size_t>(y)]++] = x;
  }
  std::deque<int> queue(fixOrder_.begin(), fixOrder_.end());
  while (!queue.empty()) {
    int r = queue.front();
    queue.pop_front();
    int d = device_[static_cast<size_t>(r)];
    for (uint32_t k = start[static_cast<size_t>(r)]; k < start[static_cast<size_t>(r) + 1]; ++k) {
      int n = adj[k];
      if (device_[static_cast<size_t>(n)] >= 0) continue;
      device_[static_cast<size_t>(n)] = d;
      queue.push_back(n);
    }
  }
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].parent == static_cast<int>(i) && device_[i] < 0) device_[i] = fallback;
}

}  // namespace kiln::compiler
